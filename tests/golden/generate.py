"""Writes the golden checkpoints: one per file format sluice writes (tests/golden_scenarios.py),
each in tests/golden/<scenario>/checkpoint with a manifest.json saying which sluice, Spark and file
format versions wrote it and what input it was fed. Run with the project's venv, with the sluice
whose formats are to be kept:

    .venv/bin/python tests/golden/generate.py [scenario ...]

A scenario's directory is replaced; the checkpoints of earlier formats are kept by never
regenerating them once a format changes (generate the new format under a new scenario name)."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pyspark.sql import SparkSession  # noqa: E402

import sluice  # noqa: E402
from golden_scenarios import BY_NAME, SCENARIOS, Query, Scenario  # noqa: E402


def formats(spark: SparkSession) -> dict[str, int]:
    """Every file format this sluice writes, from its registry (sluice.state.FileFormats)."""
    registry = spark._jvm.sluice.state.FileFormats  # type: ignore[union-attr]
    all_formats = registry.all()
    return {all_formats.apply(i).kind(): all_formats.apply(i).current() for i in range(all_formats.size())}


def generate(spark: SparkSession, scenario: Scenario) -> None:
    out = HERE / scenario.name
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
    manifest = {"scenario": scenario.name, "sluice": sluice.__version__, "spark": spark.version,
                "formats": formats(spark), "holds": scenario.files, "input": scenario.input()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in (out / "checkpoint").rglob("*") if f.is_file())
    print(f"{scenario.name}: {size} bytes")


def main(names: list[str]) -> None:
    spark = sluice.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for scenario in [BY_NAME[n] for n in names] if names else SCENARIOS:
        generate(spark, scenario)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
