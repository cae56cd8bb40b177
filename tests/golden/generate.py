"""Writes the golden checkpoints: one per file format sluice writes (tests/support/golden_scenarios.py),
each in tests/golden/<set>/<scenario>/checkpoint with a manifest.json saying which sluice, Spark
and file format versions wrote it and what input it was fed. Run with the project's venv, with the
sluice (its jar built from the sources in the tree) whose formats are to be kept:

    .venv/bin/python tests/golden/generate.py <set> [scenario ...]

A set is named by the formats it holds; a scenario's directory in it is replaced. Once a release
has written a set, it is never regenerated: a format change adds a set."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pyspark.sql import SparkSession  # noqa: E402

import sluice  # noqa: E402
from support.golden_scenarios import BY_NAME, SCENARIOS, Query, Scenario  # noqa: E402


def formats(spark: SparkSession) -> dict[str, int]:
    """Every file format this sluice writes, from its registry (sluice.state.FileFormats); none for a
    sluice without one (0.1.0, whose files carry no version: format 1 each, the window store's 2)."""
    jvm = spark._jvm  # type: ignore[union-attr]
    try:
        # Through py4j, which loads classes as Spark does (the jar is not on the system class path).
        all_formats = jvm.sluice.state.FileFormats.all()
    except Exception:  # a sluice without the registry: py4j finds only a package of that name
        return {}
    return {all_formats.apply(i).kind(): all_formats.apply(i).current() for i in range(all_formats.size())}


def commit() -> str:
    run = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "../../jvm/src/main"], cwd=HERE,
                           capture_output=True, text=True).stdout.strip()
    return run.stdout.strip() + (" with changes to jvm/src/main" if dirty else "")


def generate(spark: SparkSession, set_name: str, scenario: Scenario) -> None:
    out = HERE / set_name / scenario.name
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "checkpoint"
        q = Query(spark, scenario, ckpt, Path(tmp) / "in")
        for settings, batches in scenario.runs:
            q.run(settings, batches)
        if not list(ckpt.glob(scenario.files)):
            raise SystemExit(f"{scenario.name}: the checkpoint has no {scenario.files}")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        # Hadoop's checksum files only double the file count: a file without one is read unchecked.
        shutil.copytree(ckpt, out / "checkpoint", ignore=shutil.ignore_patterns(".*.crc"))
    manifest = {"scenario": scenario.name, "sluice": sluice.__version__, "sources": commit(), "spark": spark.version,
                "formats": formats(spark), "holds": scenario.files, "input": scenario.input()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in (out / "checkpoint").rglob("*") if f.is_file())
    print(f"{scenario.name}: {size} bytes")


def main(set_name: str, names: list[str]) -> None:
    spark = sluice.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for scenario in [BY_NAME[n] for n in names] if names else SCENARIOS:
        generate(spark, set_name, scenario)
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
