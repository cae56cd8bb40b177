"""Kafka Streams vs sluice on Spark: the same windowed count with final results, on the same local
KRaft broker and the same two cores. Run through bench/kafka_streams/run (which builds the
Kafka Streams app first); see README.md for what is measured and how.

    bench/kafka_streams/run [--records 200000] [--keys 20000] [--repeats 2] [--rate 50000] ...
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import kafka_harness as kh  # noqa: E402
from harness import Harness  # noqa: E402
from pyspark.version import __version__ as PYSPARK_VERSION  # noqa: E402

import sluice  # noqa: E402

KS, SL = "kafka-streams", "sluice"
CP = f"{HERE / 'target' / 'classes'}:{HERE / 'target' / 'lib' / '*'}"


def java(heap: str) -> list[str]:
    return ["java", f"-Xmx{heap}", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", CP, "Bench"]


def tool(mode: str, *args: Any) -> dict[str, Any]:
    """Runs one Bench tool mode to completion; its last stdout line is JSON."""
    out = subprocess.run(java("2g") + [mode, *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"Bench {mode} failed ({out.returncode}): {out.stderr[-3000:]}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


class Side:
    """One side's process: JSON events on stdout, stopped by "stop" on stdin."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, cwd=ROOT)
        self.events: "queue.Queue[dict[str, Any]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.seen: dict[str, dict[str, Any]] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                try:
                    self.events.put(json.loads(line))
                except json.JSONDecodeError:
                    pass
        self.events.put({"event": "exit"})

    def wait(self, event: str, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while event not in self.seen:
            e = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            self.seen[e.get("event", "")] = e
            if e.get("event") == "exit" and event != "exit":
                raise RuntimeError(f"side exited before '{event}'; see {self.log.name}")
        return self.seen[event]

    def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        stopped = self.wait("stopped", timeout=180)
        self.proc.stdin.close()
        self.proc.wait(120)
        self.log.close()
        return stopped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="backlog records (issue: 10M)")
    ap.add_argument("--keys", type=int, default=20_000, help="distinct keys (issue: 1M)")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the key ranks")
    ap.add_argument("--span-s", type=int, default=3 * 3600, help="event-time span of the backlog")
    ap.add_argument("--disorder-ms", type=int, default=2000,
                    help="records are up to this far behind any earlier record (<= 5000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup-records", type=int, default=50_000,
                    help="records of the warm-up backlog each side drains first, unmeasured (0: none)")
    ap.add_argument("--heap", default="4g", help="max heap of both sides (Kafka Streams -Xmx, spark.driver.memory)")
    ap.add_argument("--rate", type=int, default=50_000, help="fixed-rate run: records/s (0: skip)")
    ap.add_argument("--duration-s", type=int, default=120, help="fixed-rate run: seconds")
    ap.add_argument("--rate-keys", type=int, default=0, help="fixed-rate run: keys (default --keys)")
    ap.add_argument("--latency-repeats", type=int, default=1)
    ap.add_argument("--ks-commit-ms", type=int, default=1000,
                    help="Kafka Streams commit.interval.ms (its default is 30000; see README)")
    ap.add_argument("--ks-cache-bytes", type=int, default=10 * 1024 * 1024,
                    help="Kafka Streams statestore.cache.max.bytes (its default 10485760)")
    ap.add_argument("--trigger", default="0", help="sluice's processing-time trigger (0: Spark's default)")
    ap.add_argument("--max-offsets", type=int, default=0, help="sluice's maxOffsetsPerTrigger (0: not set)")
    ap.add_argument("--timeout-s", type=int, default=1800, help="per run: output must be complete by then")
    ap.add_argument("--workdir", default="", help="broker data and checkpoints (default: a temp dir, removed)")
    ap.add_argument("--spark-ui", action="store_true", help="keep Spark's UI on (profiling)")
    a = ap.parse_args()

    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="sluice-vs-ks-"))
    if a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    broker = kh.Broker(work / "broker").start()
    bs = broker.bootstrap
    try:
        run_bench(a, work, bs)
    finally:
        broker.stop()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


def start_side(side: str, a: argparse.Namespace, work: Path, bs: str, topic: str, out: str, name: str) -> Side:
    if side == KS:
        cmd = java(a.heap) + ["streams", "--bootstrap", bs, "--input", topic, "--output", out,
                              "--app-id", f"ks-{name}", "--threads", "2", "--state-dir", str(work / f"ks-state-{name}"),
                              "--commit-interval-ms", str(a.ks_commit_ms), "--cache-bytes", str(a.ks_cache_bytes)]
    else:
        cmd = [sys.executable, str(HERE / "spark_side.py"), "--bootstrap", bs, "--input", topic, "--output", out,
               "--checkpoint", str(work / f"ckpt-{name}"), "--heap", a.heap, "--trigger", a.trigger,
               "--max-offsets", str(a.max_offsets)] + (["--ui"] if a.spark_ui else [])
    return Side(cmd, work / f"{name}.log")


def drain(side: str, a: argparse.Namespace, work: Path, bs: str, topic: str, expected: Path,
          expected_rows: int, records: int, name: str) -> dict[str, Any]:
    out = f"out-{name}"
    tool("create-topic", "--bootstrap", bs, "--topic", out, "--partitions", 2, "--log-append-time")
    s = start_side(side, a, work, bs, topic, out, name)
    try:
        config = s.wait("config", timeout=300)
        started = s.wait("started", timeout=300)
        w = tool("watch", "--bootstrap", bs, "--topic", out, "--count", expected_rows, "--timeout-s", a.timeout_s)
        if w.get("timeout"):
            raise RuntimeError(f"{name}: output incomplete after {a.timeout_s} s: {w}; see {s.log.name}")
    finally:
        stopped = s.stop() if s.proc.poll() is None else {"vm_hwm_kb": -1}
    c = tool("collect", "--bootstrap", bs, "--topic", out, "--expected", expected, "--out", work / f"{name}.rows")
    drain_s = (c["last_append_ms"] - started["start_ms"]) / 1000
    result = {"records_per_s": round(records / drain_s), "drain_s": round(drain_s, 2),
              "first_result_s": round((c["first_append_ms"] - started["start_ms"]) / 1000, 2),
              "running_s": round((s.seen["running"]["running_ms"] - started["start_ms"]) / 1000, 2)
              if "running" in s.seen else None,
              "peak_rss_mb": round(stopped["vm_hwm_kb"] / 1024), "rows": c["rows"],
              "differing_from_expected": c["differing_from_expected"], "dropped": stopped.get("dropped_records"),
              "rows_file": str(work / f"{name}.rows"), "config": config}
    if side == SL:
        result["batches"] = stopped.get("batches")
        result["micro_batches"] = len(stopped.get("batches") or [])
        if stopped.get("failure"):
            raise RuntimeError(f"{name}: query failed: {stopped['failure']}")
    return result


def run_bench(a: argparse.Namespace, work: Path, bs: str) -> None:
    settings = {
        "machine": f"{os.cpu_count()} cores; load at start {os.getloadavg()[0]:.2f} (1 min)",
        "broker": "Kafka 3.9.1 KRaft, one node on loopback (tests/kafka_harness.py)",
        "backlog": f"{a.records} records, {a.keys} keys Zipf({a.zipf}), event times over {a.span_s} s, "
                   f"disorder <= {a.disorder_ms} ms, 2 partitions (key hash), seed {a.seed}, "
                   "then one flush record per partition 1 h past the last event time",
        "topology": "count per key and 1-minute tumbling window, grace / watermark delay 10 s, "
                    "one final result per window (suppress until the window closes), to a 2-partition topic",
        KS: "Kafka Streams 4.1.1, 2 stream threads, Stores.inMemoryWindowStore, "
            "suppress(untilWindowCloses(unbounded())), defaults otherwise (at-least-once, changelogs on), "
            f"commit.interval.ms {a.ks_commit_ms}, statestore.cache.max.bytes {a.ks_cache_bytes}, -Xmx{a.heap}",
        SL: f"Spark {PYSPARK_VERSION} local[2] + sluice (Python API, {os.path.basename(sluice.jar_path())}), spark.driver.memory={a.heap}, shuffle partitions 2, "
            "state store sluice.windowstore.InMemoryWindowStoreProvider, suppress(until_window_closes(unbounded())), "
            f"Kafka source (earliest) and sink, checkpoint on local disk, trigger "
            f"{'default' if a.trigger == '0' else a.trigger}, maxOffsetsPerTrigger {a.max_offsets or 'not set'}",
        "drain time": "from the start() call (KafkaStreams.start / DataStreamWriter.start, process and "
                      "session start excluded) to the broker's LogAppendTime of the last final result",
        "peak RSS": "VmHWM of the Kafka Streams JVM; of the Spark JVM + the Python driver (sum of both peaks)",
    }
    h = Harness("kafka_streams", "drain a backlog: Kafka Streams vs sluice on Spark, same topology", settings)

    tool("create-topic", "--bootstrap", bs, "--topic", "in", "--partitions", 2)
    gen = tool("backlog", "--bootstrap", bs, "--topic", "in", "--records", a.records, "--keys", a.keys,
               "--zipf", a.zipf, "--span-s", a.span_s, "--disorder-ms", a.disorder_ms, "--seed", a.seed,
               "--expected", work / "expected.rows")
    print(f"   backlog: {gen}")
    warm: dict[str, Any] = {}
    if a.warmup_records:
        tool("create-topic", "--bootstrap", bs, "--topic", "warm", "--partitions", 2)
        warm = tool("backlog", "--bootstrap", bs, "--topic", "warm", "--records", a.warmup_records,
                    "--keys", a.keys, "--zipf", a.zipf, "--span-s", 1800, "--disorder-ms", a.disorder_ms,
                    "--seed", a.seed + 1, "--expected", work / "warm.rows")

    def warmup(side: str) -> None:
        if warm:
            r = drain(side, a, work, bs, "warm", work / "warm.rows", warm["expected_rows"], a.warmup_records,
                      f"warm-{side}")
            print(f"   warm-up {side}: {r['drain_s']} s, differing {r['differing_from_expected']}")

    def run(side: str, i: int) -> dict[str, Any]:
        return drain(side, a, work, bs, "in", work / "expected.rows", gen["expected_rows"], a.records,
                     f"{side}-{i}")

    runs: dict[str, list[dict[str, Any]]] = {}
    cross: list[int] = []
    if a.repeats > 0:  # --repeats 0: only the fixed-rate run
        runs = h.alternating([KS, SL], a.repeats, run, warmup=warmup if warm else None)
        for side in (KS, SL):
            print(f"   {side} settings: {json.dumps(runs[side][0]['config'])}")
        for r in runs[SL]:
            b = r.get("batches") or []
            print(f"   sluice batches (rows, ms): {[(x['rows'], x['ms']) for x in b][:40]}")
            for x in b[:10]:
                print(f"     batch {x['batch']}: {x['durations']} state {x.get('state')}")

        # Every run's result rows against the first Kafka Streams run's (and against the generator's).
        ref = runs[KS][0]["rows_file"]
        cross = [tool("diff", ref, r["rows_file"])["differing"] for side in (KS, SL) for r in runs[side]]
        worst = max(cross + [r["differing_from_expected"] for side in (KS, SL) for r in runs[side]])
        print(f"   differing rows against {KS} repeat 1: {cross}; against the generator's expected results: "
              f"{[r['differing_from_expected'] for side in (KS, SL) for r in runs[side]]} "
              f"(expected rows {gen['expected_rows']})")
        ks_rps = statistics.median(r["records_per_s"] for r in runs[KS])
        sl_rps = statistics.median(r["records_per_s"] for r in runs[SL])
        print(f"   median drain: {KS} {ks_rps:.0f} records/s, {SL} {sl_rps:.0f} records/s; peak RSS MB: "
              f"{KS} {[r['peak_rss_mb'] for r in runs[KS]]}, {SL} {[r['peak_rss_mb'] for r in runs[SL]]}")
        h.target("sluice / Kafka Streams drain throughput (median records/s)", sl_rps / ks_rps, ">=", 1.0)
        h.target("differing rows, worst run", float(worst), "<=", 0.0)

    latency: dict[str, list[dict[str, Any]]] = {}
    if a.rate:
        for i in range(a.latency_repeats):
            for side in ([KS, SL] if i % 2 == 0 else [SL, KS]):
                r = fixed_rate(side, a, work, bs, f"lat-{side}-{i}")
                latency.setdefault(side, []).append(r)
                print(f"   latency {side} repeat {i + 1}: " + ", ".join(
                    f"{k}={v}" for k, v in r.items() if not isinstance(v, (dict, list))))
    for runs_ in runs.values():
        for r in runs_:
            r.pop("config", None)
    h.write(backlog=gen, latency=latency, differing_vs_first_ks=cross)


def fixed_rate(side: str, a: argparse.Namespace, work: Path, bs: str, name: str) -> dict[str, Any]:
    """`a.rate` records/s for `a.duration_s` into a fresh topic that `side` is already consuming; latency
    of each final result from the send of the record that closed its window."""
    topic, out = f"in-{name}", f"out-{name}"
    tool("create-topic", "--bootstrap", bs, "--topic", topic, "--partitions", 2)
    tool("create-topic", "--bootstrap", bs, "--topic", out, "--partitions", 2, "--log-append-time")
    s = start_side(side, a, work, bs, topic, out, name)
    try:
        s.wait("running", timeout=300)
        gen = tool("rate", "--bootstrap", bs, "--topic", topic, "--rate", a.rate, "--duration-s", a.duration_s,
                   "--keys", a.rate_keys or a.keys, "--zipf", a.zipf, "--disorder-ms", a.disorder_ms,
                   "--seed", a.seed + 7, "--expected", work / f"{name}.expected", "--closes", work / f"{name}.closes")
        w = tool("watch", "--bootstrap", bs, "--topic", out, "--count", gen["expected_rows"], "--timeout-s", a.timeout_s)
        if w.get("timeout"):
            raise RuntimeError(f"{name}: output incomplete: {w}; see {s.log.name}")
    finally:
        stopped = s.stop() if s.proc.poll() is None else {"vm_hwm_kb": -1}
    c = tool("collect", "--bootstrap", bs, "--topic", out, "--expected", work / f"{name}.expected",
             "--out", work / f"{name}.rows", "--closes", work / f"{name}.closes")
    trig = "default (next batch as soon as the previous ends)" if a.trigger == "0" else a.trigger
    r = {"trigger": trig if side == SL else "n/a (record at a time)", "produced": gen["records"],
         "achieved_rate": gen["achieved_rate"], "min_ms": c.get("latency_min_ms"), "p50_ms": c.get("latency_p50_ms"),
         "from_ack_p50_ms": c.get("from_ack_p50_ms"), "from_ack_p99_ms": c.get("from_ack_p99_ms"), "p99_ms": c.get("latency_p99_ms"),
         "max_ms": c.get("latency_max_ms"), "results_timed": c.get("latency_rows"),
         "results_closed_by_flush": c.get("rows_closed_by_flush"),
         "differing_from_expected": c["differing_from_expected"], "dropped": stopped.get("dropped_records"),
         "peak_rss_mb": round(stopped["vm_hwm_kb"] / 1024),
         "sends_over_100ms_late": gen.get("sends_over_100ms_late"),
         "latency_clock": "broker LogAppendTime of the result - producer wall clock at send (from_ack: at the "
                          "broker's acknowledgement) of the closing record"}
    if side == SL:
        b = stopped.get("batches") or []
        r["micro_batches"] = len(b)
        if b:
            r["median_batch_ms"] = statistics.median(x["ms"] for x in b)
    return r


if __name__ == "__main__":
    main()
