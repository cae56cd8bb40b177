"""sluice on Spark against its strongest peers, Flink and Kafka Streams: Nexmark q5, q7, q8, q11 and
bench/kafka_streams' windowed count, on the same local KRaft broker, each side in its own process
with two cores' worth of parallelism, sides alternating. Run through bench/peers/run (which builds the
JVM sides first); README.md says what is measured and how.

    bench/peers/run [--queries count,q5,q7,q8,q11] [--sides flink,kafka-streams,sluice] [--events 10000000]
                    [--repeats 2] [--rate 50000 --duration-s 120] ...
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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

# The side-process wrapper of bench/kafka_streams (JSON events on stdout, "stop" on stdin).
_spec = importlib.util.spec_from_file_location("ks_bench", ROOT / "bench" / "kafka_streams" / "bench.py")
ks_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ks_bench)  # type: ignore[union-attr]
Side = ks_bench.Side

FL, KS, SL = "flink", "kafka-streams", "sluice"
QUERIES = ["count", "q5", "q7", "q8", "q11"]
TARGET = HERE / "target"
CP_STREAMS = f"{TARGET / 'classes-streams'}:{TARGET / 'lib-streams' / '*'}"
CP_FLINK = f"{TARGET / 'classes-flink'}:{TARGET / 'lib-flink' / '*'}"
# What Flink's own launch scripts open on Java 17 (Kryo and reflection over JDK classes).
FLINK_JVM = ["--add-exports=java.base/sun.net.util=ALL-UNNAMED", "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
             "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
             "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.net=ALL-UNNAMED",
             "--add-opens=java.base/java.io=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
             "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
             "--add-opens=java.base/java.text=ALL-UNNAMED", "--add-opens=java.base/java.time=ALL-UNNAMED",
             "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
             "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
             "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED"]
LOG = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


def tool(mode: str, *args: Any, heap: str = "3g") -> dict[str, Any]:
    """Runs one tool mode (Peers, or bench/kafka_streams' Bench) to completion; its last stdout line is JSON."""
    main = "Bench" if mode in ("create-topic", "backlog", "rate") else "Peers"
    out = subprocess.run(["java", f"-Xmx{heap}", *LOG, "-cp", CP_STREAMS, main, mode, *map(str, args)],
                         capture_output=True, text=True)
    if out.returncode not in (0, 2):
        raise RuntimeError(f"{main} {mode} failed ({out.returncode}): {out.stderr[-3000:]}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


class Data:
    """One query family's input topic and expected rows (the count's own backlog, or Nexmark's)."""

    def __init__(self, topic: str, events: int, expected: dict[str, Path], summary: dict[str, Any]) -> None:
        self.topic, self.events, self.expected, self.summary = topic, events, expected, summary

    def cut(self, a: argparse.Namespace, q: str) -> list[Any]:
        """watch/collect arguments: Nexmark rows are compared for the windows closing by the cut."""
        return [] if q == "count" else ["--cut-ms", self.summary["cut_ms"], "--lateness-ms", a.lateness_ms]


def make_nexmark(a: argparse.Namespace, work: Path, bs: str, topic: str, events: int, seed: int, event_rate: int) -> Data:
    tool("create-topic", "--bootstrap", bs, "--topic", topic, "--partitions", 2)
    d = work / topic
    g = tool("nexmark", "--bootstrap", bs, "--topic", topic, "--events", events, "--event-rate", event_rate,
             "--seed", seed, "--out-dir", d, "--lateness-ms", a.lateness_ms)
    return Data(topic, events, {q: d / f"expected-{q}.rows" for q in QUERIES if q != "count"}, g)


def make_count(a: argparse.Namespace, work: Path, bs: str, topic: str, records: int, seed: int, span_s: int) -> Data:
    tool("create-topic", "--bootstrap", bs, "--topic", topic, "--partitions", 2)
    (work / topic).mkdir(exist_ok=True)
    g = tool("backlog", "--bootstrap", bs, "--topic", topic, "--records", records, "--keys", max(1, records // 10),
             "--zipf", 1.0, "--span-s", span_s, "--disorder-ms", 2000, "--seed", seed,
             "--expected", work / topic / "expected.bin")
    tool("count-expected", "--in", work / topic / "expected.bin", "--out", work / topic / "expected-count.rows")
    return Data(topic, records, {"count": work / topic / "expected-count.rows"}, g)


def lateness(a: argparse.Namespace, q: str) -> int:
    return a.count_grace_ms if q == "count" else a.lateness_ms


def start_side(side: str, q: str, a: argparse.Namespace, work: Path, bs: str, topic: str, out: str, name: str,
               late: int | None = None) -> Side:
    late = lateness(a, q) if late is None else late
    if side == KS:
        cmd = ["java", f"-Xmx{a.heap}", *LOG, "-cp", CP_STREAMS, "PeersStreams", "--query", q, "--bootstrap", bs,
               "--input", topic, "--output", out, "--app-id", f"ks-{name}", "--threads", str(a.ks_threads),
               "--state-dir", str(work / f"ks-state-{name}"), "--lateness-ms", str(late),
               "--commit-interval-ms", str(a.ks_commit_ms), "--cache-bytes", str(a.ks_cache_bytes)]
    elif side == FL:
        cmd = ["java", f"-Xmx{a.heap}", *FLINK_JVM, *LOG, "-cp", CP_FLINK, "PeersFlink", "--query", q,
               "--bootstrap", bs, "--input", topic, "--output", out, "--lateness-ms", str(late), "--parallelism", "2",
               "--checkpoint-ms", str(a.flink_checkpoint_ms), "--checkpoint-dir", str(work / f"flink-ckpt-{name}")]
    else:
        cmd = [sys.executable, str(HERE / "spark_side.py"), "--query", q, "--bootstrap", bs, "--input", topic,
               "--output", out, "--checkpoint", str(work / f"ckpt-{name}"), "--lateness-ms", str(late),
               "--heap", a.heap, "--trigger", a.trigger, "--max-offsets", str(a.max_offsets)]
    return Side(cmd, work / f"{name}.log")


def stop(s: Side) -> dict[str, Any]:
    return s.stop() if s.proc.poll() is None else {"vm_hwm_kb": -1, "failure": f"exited; see {s.log.name}"}


def drain(side: str, q: str, a: argparse.Namespace, work: Path, bs: str, data: Data, name: str) -> dict[str, Any]:
    out = f"out-{name}"
    tool("create-topic", "--bootstrap", bs, "--topic", out, "--partitions", 2, "--log-append-time")
    expected = data.expected[q]
    expected_rows = sum(1 for _ in open(expected))
    s = start_side(side, q, a, work, bs, data.topic, out, name)
    try:
        config = s.wait("config", timeout=300)
        started = s.wait("started", timeout=300)
        w = tool("watch", "--bootstrap", bs, "--topic", out, "--count", expected_rows, "--timeout-s", a.timeout_s,
                 "--idle-s", a.idle_s, "--query", q, *data.cut(a, q))
    finally:
        stopped = stop(s)
    c = tool("collect", "--bootstrap", bs, "--topic", out, "--query", q, "--expected", expected,
             "--out", work / f"{name}.rows", *data.cut(a, q))
    drain_s = (c["last_append_ms"] - started["start_ms"]) / 1000 if c["rows"] else float("nan")
    result = {"events_per_s": round(data.events / drain_s) if c["rows"] else 0, "drain_s": round(drain_s, 2),
              "first_result_s": round((c["first_append_ms"] - started["start_ms"]) / 1000, 2) if c["rows"] else None,
              "peak_rss_mb": round(stopped["vm_hwm_kb"] / 1024), "rows": c["rows"], "rows_after_cut": c["rows_after_cut"],
              "expected_rows": expected_rows, "differing_from_expected": c["differing_from_expected"],
              "complete": not w.get("timeout"), "dropped": stopped.get("dropped_records"),
              "rows_file": str(work / f"{name}.rows"), "config": config}
    if stopped.get("failure"):
        result["failure"] = stopped["failure"]
    if side == SL:
        result["micro_batches"] = len(stopped.get("batches") or [])
        result["batches"] = stopped.get("batches")
    return result


def fixed_rate(side: str, q: str, a: argparse.Namespace, work: Path, bs: str, name: str) -> dict[str, Any]:
    """`a.rate` events/s for `a.duration_s` into a fresh topic that `side` already consumes; latency of
    every final result from the moment its window closed (window end + lateness, on the producer's clock)."""
    topic, out = f"in-{name}", f"out-{name}"
    tool("create-topic", "--bootstrap", bs, "--topic", topic, "--partitions", 2)
    tool("create-topic", "--bootstrap", bs, "--topic", out, "--partitions", 2, "--log-append-time")
    d = work / name
    d.mkdir(exist_ok=True)
    late = a.count_grace_ms if q == "count" else a.rate_lateness_ms
    s = start_side(side, q, a, work, bs, topic, out, name, late)
    try:
        s.wait("running", timeout=300)
        if q == "count":
            gen = tool("rate", "--bootstrap", bs, "--topic", topic, "--rate", a.rate, "--duration-s", a.duration_s,
                       "--keys", max(1, a.rate * 60 // 10), "--zipf", 1.0, "--disorder-ms", 2000, "--seed", a.seed + 7,
                       "--expected", d / "expected.bin", "--closes", d / "closes")
            tool("count-expected", "--in", d / "expected.bin", "--out", d / "expected-count.rows")
            gen["last_event_ms"] = tool("last-event-ms", "--bootstrap", bs, "--topic", topic)["last_event_ms"]
        else:
            gen = tool("nexmark-live", "--bootstrap", bs, "--topic", topic, "--rate", a.rate, "--duration-s", a.duration_s,
                       "--seed", a.seed + 7, "--out-dir", d, "--lateness-ms", late)
        expected = d / f"expected-{q}.rows"
        n = sum(1 for _ in open(expected))
        cut = [] if q == "count" else ["--cut-ms", gen["cut_ms"]]
        w = tool("watch", "--bootstrap", bs, "--topic", out, "--count", n, "--timeout-s", a.timeout_s,
                 "--idle-s", a.idle_s, "--query", q,
                 "--lateness-ms", late, *cut)
    finally:
        stopped = stop(s)
    c = tool("collect", "--bootstrap", bs, "--topic", out, "--query", q, "--expected", expected,
             "--out", work / f"{name}.rows", "--lateness-ms", late, "--last-event-ms", gen["last_event_ms"], *cut)
    r = {"produced": gen.get("events", gen.get("records")), "achieved_rate": gen.get("achieved_rate"),
         "sends_over_100ms_late": gen.get("sends_over_100ms_late"), "results_timed": c.get("latency_rows"),
         "results_closing_after_last_event": c.get("rows_closing_after_last_event"), "min_ms": c.get("latency_min_ms"),
         "p50_ms": c.get("latency_p50_ms"), "p99_ms": c.get("latency_p99_ms"), "max_ms": c.get("latency_max_ms"),
         "differing_from_expected": c["differing_from_expected"], "complete": not w.get("timeout"),
         "dropped": stopped.get("dropped_records"), "peak_rss_mb": round(stopped["vm_hwm_kb"] / 1024)}
    if side == SL:
        b = stopped.get("batches") or []
        r["micro_batches"] = len(b)
        if b:
            r["median_batch_ms"] = statistics.median(x["ms"] for x in b)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated, of " + ",".join(QUERIES))
    ap.add_argument("--sides", default=f"{FL},{KS},{SL}")
    ap.add_argument("--events", type=int, default=10_000_000, help="Nexmark backlog events (and count records)")
    ap.add_argument("--count-records", type=int, default=0, help="the count's backlog (default --events; keys: a tenth)")
    ap.add_argument("--event-rate", type=int, default=10_000,
                    help="Nexmark events per second of event time (Nexmark's default first event rate)")
    ap.add_argument("--lateness-ms", type=int, default=60_000,
                    help="Nexmark queries: allowed lateness (Kafka Streams grace, Flink's bounded out-of-orderness, "
                         "Spark's watermark delay)")
    ap.add_argument("--count-grace-ms", type=int, default=10_000, help="the count's grace (bench/kafka_streams: 10 s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup-events", type=int, default=50_000, help="a separate backlog each side drains first, "
                    "unmeasured, per query (0: none)")
    ap.add_argument("--heap", default="4g", help="max heap of every side")
    ap.add_argument("--rate", type=int, default=50_000, help="fixed-rate run: events/s (0: skip)")
    ap.add_argument("--duration-s", type=int, default=120)
    ap.add_argument("--rate-lateness-ms", type=int, default=10_000,
                    help="Nexmark queries' allowed lateness in the fixed-rate runs (a live stream needs less than a "
                         "drain; rows are compared for windows closing 2 x (10 s + this) + 2 s before the end)")
    ap.add_argument("--ks-commit-ms", type=int, default=1000, help="Kafka Streams commit.interval.ms (see README)")
    ap.add_argument("--rebalance-delay-ms", type=int, default=0,
                    help="the broker's group.initial.rebalance.delay.ms (the project's test broker: 0; Kafka's default 3000)")
    ap.add_argument("--ks-threads", type=int, default=2, help="Kafka Streams num.stream.threads (see README: 1 "
                    "keeps its tasks in step on a small or loaded run)")
    ap.add_argument("--ks-cache-bytes", type=int, default=10 * 1024 * 1024)
    ap.add_argument("--flink-checkpoint-ms", type=int, default=10_000, help="Flink checkpoint interval (0: off)")
    ap.add_argument("--trigger", default="0", help="sluice's processing-time trigger (0: Spark's default)")
    ap.add_argument("--max-offsets", type=int, default=0, help="sluice's maxOffsetsPerTrigger (0: not set)")
    ap.add_argument("--timeout-s", type=int, default=1800, help="per run: output must be complete by then")
    ap.add_argument("--idle-s", type=int, default=120, help="per run: give up when the output, once started, has "
                    "not grown for this long without being complete (a side that dropped rows)")
    ap.add_argument("--workdir", default="", help="broker data, checkpoints, rows (default: a temp dir, removed)")
    a = ap.parse_args()
    queries = [q for q in a.queries.split(",") if q]
    sides = [s for s in a.sides.split(",") if s]
    bad = [q for q in queries if q not in QUERIES] + [s for s in sides if s not in (FL, KS, SL)]
    if bad:
        ap.error(f"unknown: {bad}")

    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="sluice-peers-"))
    if a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    # The project's test broker starts group rebalances at once; --rebalance-delay-ms sets Kafka's
    # default 3 s instead (Kafka Streams' threads then join the first rebalance together).
    broker = kh.Broker(work / "broker", {"group.initial.rebalance.delay.ms": str(a.rebalance_delay_ms)}).start()
    try:
        run(a, queries, sides, work, broker.bootstrap)
    finally:
        broker.stop()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


def run(a: argparse.Namespace, queries: list[str], sides: list[str], work: Path, bs: str) -> None:
    count_records = a.count_records or a.events
    settings = {
        "machine": f"{os.cpu_count()} cores; load at start {os.getloadavg()[0]:.2f} (1 min)",
        "broker": "Kafka 3.9.1 KRaft, one node on loopback (tests/kafka_harness.py); topics of 2 partitions",
        "nexmark": f"{a.events} events (persons:auctions:bids 1:3:46, Nexmark's hot sellers/auctions/bidders), "
                   f"{a.event_rate} events per second of event time, in order, round-robin over 2 partitions, "
                   f"JSON values, seed {a.seed}; rows compared for the windows that close by last event time - "
                   f"2 x (10 s + lateness) - 2 s (no flush events)",
        "count": f"bench/kafka_streams' backlog: {count_records} records, {max(1, count_records // 10)} keys Zipf(1.0), "
                 "3 h of event time, disorder <= 2 s, keyed; 1-minute tumbling count per key, "
                 f"grace {a.count_grace_ms} ms",
        "allowed lateness (Nexmark)": f"{a.lateness_ms} ms on every side (fixed-rate runs: {a.rate_lateness_ms} ms)",
        FL: f"Flink 2.3.0 DataStream API, local MiniCluster parallelism 2, state backend hashmap (Flink's default), "
            f"checkpoints every {a.flink_checkpoint_ms} ms (0 = off) to local disk, Kafka connector 5.0.0-2.2, "
            f"-Xmx{a.heap}",
        KS: f"Kafka Streams 4.1.1, {a.ks_threads} stream thread(s), in-memory window/session stores, "
            "suppress(untilWindowCloses(unbounded())), at-least-once, changelogs on, "
            f"commit.interval.ms {a.ks_commit_ms}, statestore.cache.max.bytes {a.ks_cache_bytes}, -Xmx{a.heap}",
        SL: f"Spark {PYSPARK_VERSION} local[2] micro-batch + sluice (Python API, {os.path.basename(sluice.jar_path())}), "
            f"spark.driver.memory={a.heap}, shuffle partitions 2, state store in_memory_window, "
            "suppress(until_window_closes(unbounded())) (q11: Spark's append-mode session_window), trigger "
            f"{'default' if a.trigger == '0' else a.trigger}, maxOffsetsPerTrigger {a.max_offsets or 'not set'}",
        "drain time": "from the side's start() call (KafkaStreams.start, StreamExecutionEnvironment.executeAsync, "
                      "DataStreamWriter.start; process start excluded) to the broker LogAppendTime of the last result",
        "peak RSS": "VmHWM of the side's JVM (Spark: JVM + Python driver)",
    }
    h = Harness("peers", "drain a Nexmark backlog: sluice on Spark vs Flink vs Kafka Streams", settings)

    data: dict[str, Data] = {}
    warm: dict[str, Data] = {}
    if any(q != "count" for q in queries):
        data["nexmark"] = make_nexmark(a, work, bs, "nexmark", a.events, a.seed, a.event_rate)
        print(f"   nexmark backlog: {data['nexmark'].summary}")
        if data["nexmark"].summary["cut_ms"] < data["nexmark"].summary["first_ts"] + 30_000:
            print("   WARNING: the backlog spans too little event time for the lateness: few or no windows close "
                  "by the cut (more --events, a lower --event-rate or a smaller --lateness-ms)")
        if a.warmup_events:
            # Spread over 2 x the cut's margin of event time, so that the warm-up has windows to close.
            rate = max(1, a.warmup_events * 1000 // (4 * (10_000 + a.lateness_ms) + 10_000))
            warm["nexmark"] = make_nexmark(a, work, bs, "warm-nexmark", a.warmup_events, a.seed + 1, rate)
    if "count" in queries:
        data["count"] = make_count(a, work, bs, "count-in", count_records, a.seed, 3 * 3600)
        print(f"   count backlog: {data['count'].summary}")
        if a.warmup_events:
            warm["count"] = make_count(a, work, bs, "warm-count", a.warmup_events, a.seed + 1, 1800)

    def family(q: str) -> str:
        return "count" if q == "count" else "nexmark"

    comparisons: dict[str, Any] = {}
    latency: dict[str, list[dict[str, Any]]] = {}
    for qi, q in enumerate(queries):
        names = [f"{q}/{s}" for s in sides]

        def warmup(name: str, q: str = q) -> None:
            side = name.split("/")[1]
            r = drain(side, q, a, work, bs, warm[family(q)], f"warm-{q}-{side}")
            print(f"   warm-up {name}: {r['drain_s']} s, differing {r['differing_from_expected']}")

        def one(name: str, i: int, q: str = q) -> dict[str, Any]:
            return drain(name.split("/")[1], q, a, work, bs, data[family(q)], f"{q}-{name.split('/')[1]}-{i}")

        if a.repeats > 0:
            runs = h.alternating(names, a.repeats, one, warmup=warmup if warm else None)
            for name in names:
                print(f"   {name} settings: {json.dumps(runs[name][0]['config'])}")
            for r in runs.get(f"{q}/{SL}", []):
                b = r.get("batches") or []
                print(f"   {q}/sluice micro-batches (rows, ms): {[(x['rows'], x['ms']) for x in b][:20]}")
            # Every run against the generator's reference and against the first run of the first side.
            ref = runs[names[0]][0]["rows_file"]
            cross = {name: [tool("diff", ref, r["rows_file"]) for r in runs[name]] for name in names}
            worst = max([r["differing_from_expected"] for n in names for r in runs[n]]
                        + [d["differing"] for n in names for d in cross[n]])
            print(f"   {q}: expected rows {runs[names[0]][0]['expected_rows']}; differing from the reference: "
                  f"{ {n: [r['differing_from_expected'] for r in runs[n]] for n in names} }; from {names[0]} "
                  f"repeat 1: { {n: [d['differing'] for d in cross[n]] for n in names} }")
            for n in names:
                for d in cross[n]:
                    if d["differing"]:
                        print(f"     {n} vs {names[0]}: {d['examples']}")
            med = {n: statistics.median(r["events_per_s"] for r in runs[n]) for n in names}
            print(f"   {q}: median drain events/s " + ", ".join(f"{n} {v:.0f}" for n, v in med.items())
                  + "; peak RSS MB " + ", ".join(f"{n} {[r['peak_rss_mb'] for r in runs[n]]}" for n in names))
            if SL in sides:
                for other in (FL, KS):
                    if other in sides and med[f"{q}/{other}"] > 0:
                        # A run that lost rows (or stopped incomplete) did less work: say so beside the ratio.
                        bad = {n: sum(1 for r in runs[n] if r["differing_from_expected"] or not r["complete"])
                               for n in (f"{q}/{SL}", f"{q}/{other}")}
                        note = "" if not any(bad.values()) else " [runs with differing rows or incomplete: " + \
                            ", ".join(f"{n} {k} of {len(runs[n])}" for n, k in bad.items() if k) + "]"
                        h.target(f"{q}: sluice / {other} drain throughput (median events/s){note}",
                                 med[f"{q}/{SL}"] / med[f"{q}/{other}"], ">=", 1.0)
            h.target(f"{q}: differing rows, worst run (vs reference and vs {names[0]})", float(worst), "<=", 0.0)
            comparisons[q] = {n: [d["differing"] for d in cross[n]] for n in names}
            for n in names:
                for r in runs[n]:
                    r.pop("config", None)
        if a.rate:
            for side in (sides if qi % 2 == 0 else list(reversed(sides))):
                name = f"lat-{q}-{side}"
                r = fixed_rate(side, q, a, work, bs, name)
                latency.setdefault(f"{q}/{side}", []).append(r)
                print(f"   latency {q}/{side}: " + ", ".join(f"{k}={v}" for k, v in r.items()))
    h.write(data={k: v.summary for k, v in data.items()}, latency=latency, differing_vs_first=comparisons)


if __name__ == "__main__":
    main()
