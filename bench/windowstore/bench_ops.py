"""Window store at the state-store level, through bench/harness.py: runs the Scala benchmark
`sluice.windowstore.WindowStoreBenchmark` (jvm/src/test/scala) in one JVM per repeat, the sides'
order alternating between repeats, and checks the targets against the medians over the repeats.

Part 1, per side (window store, HDFS-backed, RocksDB, and the window store writing its files
through Spark's checkpoint file manager, `ws-sparkfiles`): put/commit, eviction, get and
empty-version costs in ns per row, each JVM warming every side up with one unmeasured round first.
Part 3 (window store only): heap retained per entry of prefix-scanned state against the entries'
key + value bytes.

Targets (README): window store put+commit >= 3x faster than HDFS-backed and >= 8x faster than
RocksDB at every overwrite ratio; Part 3 heap retained <= 1.5x key + value.

    .venv/bin/python bench/windowstore/bench_ops.py [--state-rows 1000000] [--batch-rows 100000]
        [--memory-keys 5000000] [--repeats 3] [--parts 1,3]
        [--sides windowstore,hdfs,rocksdb,ws-sparkfiles] [--heap 6g]

The class path and JVM options come from sbt (`Test/fullClasspath`, `Test/javaOptions` in
build.sbt), asked once per run; the JVMs then start without sbt.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MAIN = "sluice.windowstore.WindowStoreBenchmark"
MARKER = "WSBENCH "
OVERWRITES = [0, 10, 50, 90, 100]
TARGETS = {"hdfs": 3.0, "rocksdb": 8.0}  # put+commit, side/windowstore, at least
MEMORY_TARGET = 1.5  # retained / (key + value), at most


def put_op(pct: int) -> str:
    return f"put {pct}% overwrite + commit"


def java_command(heap: str) -> list[str]:
    """java with the test class path and the options build.sbt gives test JVMs, heap replaced."""
    minor = subprocess.run([str(ROOT / "dev" / "spark-versions"), "default"], capture_output=True, text=True,
                           check=True).stdout.strip()
    project = "spark" + minor.replace(".", "")  # the default Spark minor's sbt project
    out = subprocess.run([str(ROOT / "dev" / "sbt"), f"show {project}/Test/javaOptions",
                          f"export {project}/Test/fullClasspath"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    options = [line[len("[info] * "):] for line in out if line.startswith("[info] * ")]
    (classpath,) = [line for line in out if line and not line.startswith("[")]
    return ["java", *[o for o in options if not o.startswith("-Xmx")], f"-Xmx{heap}", "-cp", classpath, MAIN]


def run_jvm(java: list[str], args: list[str]) -> list[dict]:
    """One benchmark JVM; its figures (stdout lines after the marker). Its stderr passes through."""
    p = subprocess.run([*java, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{MAIN} {' '.join(args)} exited with {p.returncode}")
    return [json.loads(line[len(MARKER):]) for line in p.stdout.splitlines() if line.startswith(MARKER)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state-rows", type=int, default=1_000_000)
    ap.add_argument("--batch-rows", type=int, default=100_000)
    ap.add_argument("--memory-keys", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="1,3")
    ap.add_argument("--sides", default="windowstore,hdfs,rocksdb,ws-sparkfiles")
    ap.add_argument("--heap", default="6g")
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    sides = args.sides.split(",")
    scale = ["--state-rows", str(args.state_rows), "--batch-rows", str(args.batch_rows),
             "--memory-keys", str(args.memory_keys)]

    java = java_command(args.heap)
    h = Harness("windowstore_ops", "window store vs HDFS-backed and RocksDB at the state-store level; heap per entry",
                {"state rows": args.state_rows, "rows per version": args.batch_rows,
                 "memory keys (part 3)": args.memory_keys, "repeats": args.repeats, "parts": sorted(parts),
                 "sides (part 1)": sides, "heap": args.heap,
                 "comparator": "Spark's HDFS-backed and RocksDB providers with Spark defaults (their files through "
                               "Spark's checkpoint file manager), one provider instance each, local file system",
                 "warm-up": "every JVM runs one full unmeasured round of every side before the measured one",
                 "figure": "ns per row, best of 3 versions per case within a JVM; median over the repeats"})

    extra: dict = {}
    if 1 in parts:
        def part1(order: list[str], i: int) -> dict[str, dict]:
            figures = run_jvm(java, ["--parts", "1", "--sides", ",".join(order), *scale])
            return {side: {f["op"]: f["ns_per_row"] for f in figures if f["side"] == side} for side in order}

        runs = h.alternating_together(sides, args.repeats, part1)
        med = {side: {op: statistics.median(r[op] for r in runs[side]) for op in runs[side][0]} for side in sides}
        # each side against the window store, and the built-in ones against it writing through Spark's files
        pairs = [(s, b) for b in ("windowstore", "ws-sparkfiles") if b in sides
                 for s in sides if s != b and not (b == "ws-sparkfiles" and s == "windowstore")]
        extra["medians_ns_per_row"] = med
        labels = [f"{s}/{b}" for s, b in pairs]
        print(f"   {'operation (ns/row, median)':<40}" + "".join(f"{s:>15}" for s in sides)
              + "".join(f"{label:>{len(label) + 2}}" for label in labels))
        for op in med[sides[0]]:
            print(f"   {op:<40}" + "".join(f"{med[s][op]:>15.1f}" for s in sides)
                  + "".join(f"{med[s][op] / med[b][op]:>{len(label) + 2}.2f}" for (s, b), label in zip(pairs, labels)))
        for side, bound in TARGETS.items():
            if side in sides and "windowstore" in sides:
                for pct in OVERWRITES:
                    h.target(f"{put_op(pct)}: {side}/windowstore", med[side][put_op(pct)] / med["windowstore"][put_op(pct)],
                             ">=", bound)

    if 3 in parts:
        def part3(side: str, i: int) -> dict:
            figures = run_jvm(java, ["--parts", "3", *scale])
            return {f"{f['point']}: retained/(key+value)": f["retained_bytes"] / f["kv_bytes"] for f in figures} | {
                "figures": figures}

        runs = h.alternating(["memory"], args.repeats, part3)["memory"]
        for point in [k for k in runs[0] if k.endswith("retained/(key+value)")]:
            h.target(f"heap {point}", statistics.median(r[point] for r in runs), "<=", MEMORY_TARGET)

    h.write(**extra)


if __name__ == "__main__":
    main()
