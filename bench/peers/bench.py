"""sluice on Spark against its strongest peers, Flink (DataStream API and SQL) and Kafka Streams: Nexmark
q5, q7, q8, q11 and the windowed count (1-minute tumbling count per key, final results), on the same local KRaft broker,
each side in its own process with two cores' worth of parallelism, sides alternating; for the count
also sluice in Spark's real-time mode and Kafka Streams at its lowest-latency settings, with a
search for the highest rate each holds at a p99 latency bound. Run through bench/peers/run (which
builds the JVM sides first); README.md says what is measured and how.

    bench/peers/run [--queries count,q5,q7,q8,q11]
                    [--sides flink,flink-sql,kafka-streams,ks-lowlat,sluice,sluice-exp,sluice+FLAG,sluice-rt]
                    [--events 10000000] [--repeats 2] [--rate 50000 --duration-s 135] [--rate-search] ...
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

from support import kafka as kh  # noqa: E402
from cpu_split import CpuSplit  # noqa: E402  (beside this file)
from harness import Harness, spread  # noqa: E402
from pyspark.version import __version__ as PYSPARK_VERSION  # noqa: E402

import sluice  # noqa: E402


class Side:
    """One side's process: JSON events on stdout (config, started, running, stopped), stopped by
    "stop" on stdin."""

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


FL, FLS, KS, KSL, SL, SLX, RT = ("flink", "flink-sql", "kafka-streams", "ks-lowlat", "sluice", "sluice-exp",
                                 "sluice-rt")
COMPARATORS = (FL, FLS, KS, KSL)

# sluice's experimental rewrites, opt-in (off in the product defaults): configure() option -> (this
# bench's flag and spark_side.py's, the flag's value that turns it on, the Spark key). The `sluice` and
# `sluice-rt` sides set those whose flag is given; `sluice-exp` sets them all.
EXPERIMENTAL = {
    "json_decoder": ("json-decoder", "sluice", "spark.sluice.json.decoder"),
}
# Each flag's value at sluice's product default.
EXPERIMENTAL_OFF = {"json-decoder": "spark"}
# One side per rewrite, `sluice+<flag>`: the product defaults with that rewrite alone on, so that each
# rewrite's own gain is measured against the defaults in the same run (the decision per rewrite).
ONE_REWRITE = {f"{SL}+{flag}": flag for flag, _, _ in EXPERIMENTAL.values()}
# The queries whose plan each rewrite changes; on the others its side would measure the defaults again.
# The JSON decoder: Nexmark's from_json (the count reads the key and timestamp only).
ONE_REWRITE_QUERIES = {"json-decoder": ("q5", "q7", "q8", "q11")}
SIDES = [FL, FLS, KS, KSL, SL, SLX, *ONE_REWRITE, RT]
SPARK_SIDES = (SL, SLX, *ONE_REWRITE, RT)
# The micro-batch sluice sides, each compared with every other engine's side.
SLUICE_MB = (SL, SLX, *ONE_REWRITE)


def rewrite_flags(side: str, a: argparse.Namespace) -> dict[str, str]:
    """The experimental rewrites' flags a Spark side runs with: `sluice-exp` all on, the others as given
    (default: off, sluice's product default)."""
    if side == SLX:
        return {flag: on for flag, on, _ in EXPERIMENTAL.values()}
    if side in ONE_REWRITE:
        return {flag: (on if flag == ONE_REWRITE[side] else EXPERIMENTAL_OFF[flag])
                for flag, on, _ in EXPERIMENTAL.values()}
    return {flag: getattr(a, flag.replace("-", "_")) for flag, _, _ in EXPERIMENTAL.values()}


def sluice_keys(side: str, a: argparse.Namespace) -> dict[str, str]:
    """The spark.sluice.* keys a Spark side sets beside its state store: the experimental rewrites it
    turns on (none at the product defaults)."""
    flags = rewrite_flags(side, a)
    return {key: ("sluice" if flag == "json-decoder" else "true")
            for flag, on, key in EXPERIMENTAL.values() if flags[flag] == on}
# The broker's JVM, whose threads each drain's CPU split counts beside the side's (set once it runs).
BROKER_PIDS: list[int] = []
QUERIES = ["count", "q5", "q7", "q8", "q11"]


# The queries the real-time side runs: tumbling windows under suppress, written to the Kafka sink.
RT_QUERIES = ("count", "q7", "q8")


def supports(side: str, q: str) -> bool:
    """Real-time mode runs the count, q7 and q8: sluice's real-time suppress takes tumbling windows
    (q5's sliding windows are refused, q11's sessions are not planned by Spark in real-time mode), and
    q5 needs foreachBatch, which real-time mode refuses. A `sluice+<flag>` side runs the queries its
    rewrite changes."""
    if side in ONE_REWRITE:
        return q in ONE_REWRITE_QUERIES[ONE_REWRITE[side]]
    return side != RT or q in RT_QUERIES

TARGET = HERE / "target"
CP_STREAMS = f"{TARGET / 'classes-streams'}:{TARGET / 'lib-streams' / '*'}"
CP_FLINK = f"{TARGET / 'classes-flink'}:{TARGET / 'lib-flink' / '*'}"
CP_FLINK_SQL = f"{TARGET / 'classes-flink-sql'}:{TARGET / 'lib-flink-sql' / '*'}"
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
    """Runs one tool mode of Peers to completion; its last stdout line is JSON."""
    return tool_result(mode, tool_start(mode, *args, heap=heap))


def tool_start(mode: str, *args: Any, heap: str = "3g") -> subprocess.Popen:
    """Starts one tool mode of Peers; `tool_result` waits for it."""
    return subprocess.Popen(["java", f"-Xmx{heap}", *LOG, "-cp", CP_STREAMS, "Peers", mode, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tool_result(mode: str, proc: subprocess.Popen) -> dict[str, Any]:
    stdout, stderr = proc.communicate()
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"Peers {mode} failed ({proc.returncode}): {stderr[-3000:]}")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


class Data:
    """One query family's input topic and expected rows (the count's own backlog, or Nexmark's)."""

    def __init__(self, topic: str, events: int, expected: dict[str, Path], summary: dict[str, Any]) -> None:
        self.topic, self.events, self.expected, self.summary = topic, events, expected, summary

    def event_span(self) -> tuple[int, int]:
        """The backlog's first and last event time (ms)."""
        return int(self.summary["first_ts"]), int(self.summary.get("last_event_ms", self.summary.get("last_ts")))

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
             "--zipf", 1.0, "--span-s", span_s, "--disorder-ms", 2000, "--seed", seed, "--grace-ms", a.count_grace_ms,
             "--expected", work / topic / "expected-count.rows")
    return Data(topic, records, {"count": work / topic / "expected-count.rows"}, g)


def lateness(a: argparse.Namespace, q: str) -> int:
    return a.count_grace_ms if q == "count" else a.lateness_ms


def jfr(a: argparse.Namespace, name: str) -> list[str]:
    """With --jfr DIR: the side's JVM records a Java Flight Recording (sampling profile) to DIR/<name>.jfr,
    summarised by bench/jfr_top.py. Profiled runs are for where the time goes, not for the figures."""
    if not a.jfr:
        return []
    Path(a.jfr).mkdir(parents=True, exist_ok=True)
    return [f"-XX:StartFlightRecording=settings=profile,filename={Path(a.jfr).resolve() / name.replace('/', '-')}.jfr"]


def start_side(side: str, q: str, a: argparse.Namespace, work: Path, bs: str, topic: str, out: str, name: str,
               late: int | None = None) -> Side:
    late = lateness(a, q) if late is None else late
    if side in (KS, KSL):
        commit, cache = (a.ks_commit_ms, a.ks_cache_bytes) if side == KS else (a.ks_lowlat_commit_ms, 0)
        cmd = ["java", f"-Xmx{a.heap}", *jfr(a, name), *LOG, "-cp", CP_STREAMS, "PeersStreams", "--query", q, "--bootstrap", bs,
               "--input", topic, "--output", out, "--app-id", f"ks-{name}", "--threads", str(a.ks_threads),
               "--state-dir", str(work / f"ks-state-{name}"), "--lateness-ms", str(late),
               "--commit-interval-ms", str(commit), "--cache-bytes", str(cache)]
    elif side in (FL, FLS):
        cp, main = (CP_FLINK, "PeersFlink") if side == FL else (CP_FLINK_SQL, "PeersFlinkSql")
        cmd = ["java", f"-Xmx{a.heap}", *jfr(a, name), *FLINK_JVM, *LOG, "-cp", cp, main, "--query", q,
               "--bootstrap", bs, "--input", topic, "--output", out, "--lateness-ms", str(late), "--parallelism", "2",
               "--checkpoint-ms", str(a.flink_checkpoint_ms), "--checkpoint-dir", str(work / f"flink-ckpt-{name}")]
    else:
        cmd = [sys.executable, str(HERE / "spark_side.py"), "--query", q, "--bootstrap", bs, "--input", topic,
               "--output", out, "--checkpoint", str(work / f"ckpt-{name}"), "--lateness-ms", str(late),
               "--heap", a.heap, "--trigger", a.trigger, "--max-offsets", str(a.max_offsets),
               "--count-window-ms", str(a.count_window_ms),
               *[x for flag, value in rewrite_flags(side, a).items() for x in (f"--{flag}", value)]] + (["--stamp-emit", f"--extra-jar={HERE / 'target' / 'sendstamp.jar'}"] if a.stamp_emit else []) + [f"--sink-option={o}" for o in a.sink_option] + [f"--source-option={o}" for o in a.source_option] + [f"--spark-conf={o}" for o in a.spark_conf]
        cmd += [f"--java-option={o}" for o in jfr(a, name)]
        cmd += (["--realtime", a.rt_checkpoint, "--cores", str(a.rt_cores), "--shuffle-wait-ms", str(a.rt_shuffle_wait_ms)]
                if side == RT else ["--cores", "2"])
        # Real time: a window's finals are due at once; the sink's producer batches them for
        # --rt-sink-linger-ms (as docs/features/real-time.md advises) unless a --sink-option sets linger.ms.
        if side == RT and a.rt_sink_linger_ms >= 0 and not any(o.startswith("kafka.linger.ms=") for o in a.sink_option):
            cmd += [f"--sink-option=kafka.linger.ms={a.rt_sink_linger_ms}"]
    return Side(cmd, work / f"{name}.log")


def stop(s: Side) -> dict[str, Any]:
    return s.stop() if s.proc.poll() is None else {"vm_hwm_kb": -1, "failure": f"exited; see {s.log.name}"}


def drain(side: str, q: str, a: argparse.Namespace, work: Path, bs: str, data: Data, name: str,
          timeout_s: int | None = None) -> dict[str, Any]:
    out = f"out-{name.replace('+', '_')}"  # Kafka topic names take no "+"
    tool("create-topic", "--bootstrap", bs, "--topic", out, "--partitions", 2, "--log-append-time")
    expected = data.expected[q]
    expected_rows = sum(1 for _ in open(expected))
    # The watcher is started first, so that its own JVM start (about a second of CPU) is over before the
    # side's clock starts, not competing with the side's start for the two cores.
    watcher = tool_start("watch", "--bootstrap", bs, "--topic", out, "--count", expected_rows, "--timeout-s",
                         timeout_s or a.timeout_s, "--idle-s", a.idle_s, "--query", q, *data.cut(a, q))
    try:
        s = start_side(side, q, a, work, bs, data.topic, out, name)
        split = None
        try:
            config = s.wait("config", timeout=300)
            started = s.wait("started", timeout=300)
            split = CpuSplit({"side": lambda: [s.proc.pid], "broker": lambda: BROKER_PIDS}).start()
            w = tool_result("watch", watcher)
        finally:
            cpu = split.stop() if split else {}
            stopped = stop(s)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    first, last = data.event_span()
    c = tool("collect", "--bootstrap", bs, "--topic", out, "--query", q, "--expected", expected,
             "--out", work / f"{name}.rows", *data.cut(a, q), "--warm-from-ms", (first + last) // 2)
    drain_s = (c["last_append_ms"] - started["start_ms"]) / 1000 if c["rows"] else float("nan")
    result = {"events_per_s": round(data.events / drain_s) if c["rows"] else 0, "drain_s": round(drain_s, 2),
              "first_result_s": round((c["first_append_ms"] - started["start_ms"]) / 1000, 2) if c["rows"] else None,
              "peak_rss_mb": round(stopped["vm_hwm_kb"] / 1024), "rows": c["rows"], "rows_after_cut": c["rows_after_cut"],
              "expected_rows": expected_rows, "differing_from_expected": c["differing_from_expected"],
              "complete": not w.get("timeout"), "dropped": stopped.get("dropped_records"),
              "rows_file": str(work / f"{name}.rows"), "config": config}
    result["cpu_core_s"] = cpu
    result["warm_events_per_s"] = warm_rate(side, c.get("warm"), stopped.get("batches") or [], data, first, last)
    if stopped.get("failure"):
        result["failure"] = stopped["failure"]
    if side in SPARK_SIDES:
        result["micro_batches"] = len(stopped.get("batches") or [])
        result["batches"] = stopped.get("batches")
    return result


def warm_rate(side: str, warm: dict[str, int] | None, batches: list[dict[str, Any]], data: Data, first: int,
              last: int) -> int | None:
    """The drain's second half, without the side's start (JVM warm-up, planning, the first batch): events/s.
    A Spark side: the micro-batches that began once half the backlog was read, from the start of the first
    to the end of the last. Another side, whose output is continuous: from the first output past the
    backlog's middle (event time) to the last output, the event time its output got through (events are
    spread evenly over event time). A Spark side's output comes a batch at a time, which that reading would
    credit with the batch's whole span at its first row, so its own batches are used."""
    if side in SPARK_SIDES:
        read, chosen = 0, []
        for b in batches:
            if read >= data.events / 2 and b["rows"]:
                chosen.append(b)
            read += b["rows"]
        # The drain's second half must be in batches begun after its middle: a backlog read in one batch
        # (the count) leaves only the next batch's few rows, whose rate says nothing.
        if sum(b["rows"] for b in chosen) < data.events / 4:
            return None
        span_ms = chosen[-1]["start_ms"] + chosen[-1]["ms"] - chosen[0]["start_ms"]
        return round(sum(b["rows"] for b in chosen) * 1000 / span_ms) if span_ms > 0 else None
    if not warm or warm["to_append_ms"] <= warm["from_append_ms"]:
        return None
    events = (warm["to_close_ms"] - warm["from_close_ms"]) * data.events / (last - first)
    return round(events * 1000 / (warm["to_append_ms"] - warm["from_append_ms"]))


def start_costs(runs: dict[str, list[dict[str, Any]]], warm: dict[str, float], events: int) -> str:
    """A drain split in two: a start cost (drain time - backlog / warm rate: the cold JVM, planning, the
    first batch's extra time) and a cost per event (1 / warm rate). From the medians of both, the backlog
    at which sluice's drain would take as long as another side's. Not a target."""
    cost = {n: statistics.median(r["drain_s"] - events / r["warm_events_per_s"] for r in runs[n]) for n in warm}
    parts = ["start cost (drain s - backlog / warm rate), median: " + ", ".join(f"{n} {c:.2f} s" for n, c in cost.items())]
    for n in [x for x in warm if x.split("/")[1] in SLUICE_MB]:
        for m in [x for x in warm if x != n]:
            extra, per_event = cost[n] - cost[m], 1 / warm[m] - 1 / warm[n]
            if extra <= 0 and per_event >= 0:
                parts.append(f"{n} ahead of {m} at any backlog")
            elif extra >= 0 and per_event <= 0:
                parts.append(f"{n} behind {m} at any backlog")
            else:
                parts.append(f"{n} and {m} drain alike at {extra / per_event / 1e6:.1f}M events "
                             f"({'ahead' if extra > 0 else 'behind'} above it)")
    return "; ".join(parts)


def cpu_summary(runs: list[dict[str, Any]]) -> str:
    """The median core-seconds of each group of threads over `runs`, the side's then the broker's."""
    parts = []
    for part in ("side", "broker"):
        groups = sorted({g for r in runs for g in r.get("cpu_core_s", {}).get(part, {})})
        parts += [f"{'' if part == 'side' else 'broker '}{g} "
                  f"{statistics.median(r.get('cpu_core_s', {}).get(part, {}).get(g, 0.0) for r in runs):.1f}"
                  for g in groups]
    return ", ".join(parts)


def rate_keys(a: argparse.Namespace, rate: int) -> int:
    """The count's keys at a fixed rate: --rate-keys, or a tenth of one window's records (about ten
    records per key and window, as in the backlog)."""
    return a.rate_keys or max(1, rate * a.count_window_ms // 10_000)


def rt_p99_target_ms(a: argparse.Namespace) -> tuple[float, str]:
    """The real-time side's p99 target for this run's shape, and what it was set against: Kafka Streams
    at its lowest latency on this machine's quiet runs (its p99 there, or a little under). Windows
    closing across real-time batch switches (1-s windows) are held to 50 ms; shapes with no target of
    their own to 50 ms."""
    if a.rt_p99_target_ms:
        return float(a.rt_p99_target_ms), "--rt-p99-target-ms"
    keys = rate_keys(a, a.rate)
    if a.count_window_ms == 60_000 and a.rate == 50_000 and keys == 1_000:
        return 25.0, "50,000/s over 1,000 keys (Kafka Streams: 26 ms)"
    if a.count_window_ms == 60_000 and a.rate == 2_000 and keys == 100:
        return 20.0, "2,000/s over 100 keys (Kafka Streams: 18 ms)"
    if a.count_window_ms == 60_000 and a.rate == 50_000 and not a.rate_keys:
        return 800.0, "50,000/s over 300k keys (Kafka Streams: 853 ms)"
    if a.count_window_ms == 1_000:
        return 50.0, "1-s windows, across real-time batch switches"
    return 50.0, "no target of its own: 50 ms"


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine so far (/proc/stat's first line)."""
    t = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(t) - t[3] - t[4], sum(t)  # idle and iowait are not busy


def per_window(w: list[list[int]]) -> list[dict[str, int]]:
    """Each (input partition, window) on its own, in the order they closed, the warm-up window first; the
    instants (`*_at`, epoch ms) are for `bench/jfr_top.py --between`."""
    return [{"partition": x[0], "window_start": x[1], "closing_send_at": x[2], "first_append_at": x[4],
             "last_append_at": x[5], "first_result_ms": x[4] - x[2], "burst_ms": x[5] - x[4],
             **({"first_emit_ms": x[7] - x[2]} if len(x) > 7 and x[7] >= 0 else {}),
             **({"emit_burst_ms": x[9] - x[7]} if len(x) > 9 and x[9] >= 0 and x[7] >= 0 else {}),
             **({"emit_to_send_ms": x[8] - x[7], "send_to_append_ms": x[4] - x[8]}
                if len(x) > 8 and x[8] >= 0 and x[7] >= 0 else {})}
            for x in sorted(w, key=lambda x: (x[2], x[0]))]


def where_the_time_goes(windows: Path, closes: Path, batch_starts: list[int], warmup: int | None,
                        warmup_until: int | None = None) -> dict[str, Any]:
    """The count's latency per timed (input partition, window) split in two: the wait from the closing
    record's send to the window's first result (reading, shuffle, aggregation, the close decision, the
    sink), and the window's burst, from its first result to its last (every result of a window is due
    at the same instant, so the burst is how long the sink takes to write them all). With batch starts
    (Spark's sides), the windows whose first result came after a batch started following their closing
    record's send: in real-time mode, the windows that closed while one long-running batch ended and
    the next began. Also the wait for the first result counted from the closing record of the input
    partition that closed the window last: an engine whose event-time clock is the least over its
    input partitions (Flink's watermark, Spark's, sluice's real-time stream time) cannot close a window
    before then, while Kafka Streams closes it per partition; with records up to 2 s out of order the
    two partitions' closing records are tens of ms apart at a few thousand records/s."""
    every = [[int(x) for x in line.split()] for line in windows.read_text().splitlines() if line.strip()]
    if not every:
        return {}
    # `warmup`: the start of the window Peers collect set apart from the latency figures, listed apart here too.
    until = warmup_until if warmup_until is not None else (warmup + 1 if warmup is not None else None)
    w = [x for x in every if warmup is None or not warmup <= x[1] < until]
    if not w:
        return {"windows": 0, "per_window": per_window(every)}
    last_close: dict[int, int] = {}  # window start -> the latest send of a closing record over the partitions
    for line in closes.read_text().splitlines():
        if line.strip():
            _, start, sent, _ = (int(x) for x in line.split())
            last_close[start] = max(last_close.get(start, sent), sent)

    def pct(xs: list[int], p: float) -> int:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))]
    first = [x[4] - x[2] for x in w]
    burst = [x[5] - x[4] for x in w]
    r: dict[str, Any] = {"windows": len(w), "results_per_window_median": statistics.median(x[6] for x in w),
                         "first_result_p50_ms": pct(first, 0.5), "first_result_p99_ms": pct(first, 0.99),
                         "first_result_max_ms": max(first), "burst_p50_ms": pct(burst, 0.5),
                         "burst_p99_ms": pct(burst, 0.99), "burst_max_ms": max(burst)}
    stamped = [x for x in w if len(x) > 7 and x[7] >= 0]
    if stamped:  # --stamp-emit: the first result's emit above suppress splits the wait in two
        up = [x[7] - x[2] for x in stamped]
        sink = [x[4] - x[7] for x in stamped]
        r.update({"first_emit_p50_ms": pct(up, 0.5), "first_emit_max_ms": max(up),
                  "emit_to_append_p50_ms": pct(sink, 0.5), "emit_to_append_max_ms": max(sink)})
        spread = [x[9] - x[7] for x in stamped if len(x) > 9 and x[9] >= 0]
        if spread:  # how long the operator above suppress took to pass on a window's results: the burst's share upstream of the sink
            r.update({"emit_burst_p50_ms": pct(spread, 0.5), "emit_burst_p99_ms": pct(spread, 0.99),
                      "emit_burst_max_ms": max(spread)})
        sent = [x for x in stamped if len(x) > 8 and x[8] >= 0]
        if sent:  # SendStamp: the producer's send splits emit_to_append in Spark's write path and the producer's
            r.update({"emit_to_send_p50_ms": pct([x[8] - x[7] for x in sent], 0.5),
                      "emit_to_send_max_ms": max(x[8] - x[7] for x in sent),
                      "send_to_append_p50_ms": pct([x[4] - x[8] for x in sent], 0.5),
                      "send_to_append_max_ms": max(x[4] - x[8] for x in sent)})
        up_all = [x[7] - last_close[x[1]] for x in stamped if x[1] in last_close]
        if up_all:
            r["first_emit_after_every_partition_closed_p50_ms"] = pct(up_all, 0.5)
    r["per_window"] = per_window(every)
    after_all = [x[4] - last_close[x[1]] for x in w if x[1] in last_close]
    if after_all:
        r["first_result_after_every_partition_closed_p50_ms"] = pct(after_all, 0.5)
        r["first_result_after_every_partition_closed_max_ms"] = max(after_all)
    if batch_starts:
        crossed, rest = [], []
        for x in w:
            (crossed if any(x[2] < b <= x[4] for b in batch_starts) else rest).append(x[4] - x[2])
        r["windows_first_result_after_a_batch_start"] = len(crossed)
        if crossed:
            r["first_result_p50_ms_those"] = pct(crossed, 0.5)
        if rest:
            r["first_result_p50_ms_others"] = pct(rest, 0.5)
            r["first_result_max_ms_others"] = max(rest)
    return r


def fixed_rate(side: str, q: str, a: argparse.Namespace, work: Path, bs: str, name: str, rate: int,
               duration_s: int) -> dict[str, Any]:
    """`rate` events/s for `duration_s` into a fresh topic that `side` already consumes; the latency of
    every final result. The count: from the send (and the broker's acknowledgement) of the record that
    closed its window on its key's input partition to the result's LogAppendTime. Nexmark: from the
    moment its window closed (window end + lateness, on the producer's clock: event time = send time)."""
    topic, out = (f"{p}-{name.replace('+', '_')}" for p in ("in", "out"))  # Kafka topic names take no "+"
    tool("create-topic", "--bootstrap", bs, "--topic", topic, "--partitions", 2)
    tool("create-topic", "--bootstrap", bs, "--topic", out, "--partitions", 2, "--log-append-time")
    d = work / name
    d.mkdir(exist_ok=True)
    late = a.count_grace_ms if q == "count" else a.rate_lateness_ms
    expected = d / f"expected-{q}.rows"
    s = start_side(side, q, a, work, bs, topic, out, name, late)
    try:
        s.wait("running", timeout=300)
        cpu0 = cpu_jiffies()
        if q == "count":
            gen = tool("rate", "--bootstrap", bs, "--topic", topic, "--rate", rate, "--duration-s", duration_s,
                       "--keys", rate_keys(a, rate), "--zipf", 1.0, "--disorder-ms", a.rate_disorder_ms, "--seed", a.seed + 7,
                       "--grace-ms", late, "--expected", expected, "--closes", d / "closes")
            timing = ["--closes", d / "closes"]
            cut: list[Any] = []
        else:
            gen = tool("nexmark-live", "--bootstrap", bs, "--topic", topic, "--rate", rate, "--duration-s", duration_s,
                       "--seed", a.seed + 7, "--out-dir", d, "--lateness-ms", late)
            timing = ["--last-event-ms", gen["last_event_ms"]]
            cut = ["--cut-ms", gen["cut_ms"]]
        cpu1 = cpu_jiffies()
        n = sum(1 for _ in open(expected))
        w = tool("watch", "--bootstrap", bs, "--topic", out, "--count", n, "--timeout-s", a.timeout_s,
                 "--idle-s", a.idle_s, "--query", q, "--lateness-ms", late, *cut)
    finally:
        stopped = stop(s)
    windows = ["--windows-out", d / "windows"] if q == "count" else []
    c = tool("collect", "--bootstrap", bs, "--topic", out, "--query", q, "--expected", expected,
             "--out", work / f"{name}.rows", "--lateness-ms", late, *timing, *cut, *windows)
    r = {"rate": rate, "duration_s": duration_s, "produced": gen.get("events", gen.get("records")),
         "achieved_rate": float(gen.get("achieved_rate", 0)), "sends_over_100ms_late": gen.get("sends_over_100ms_late"),
         "results_timed": c.get("latency_rows"), "results_untimed": c.get("rows_untimed"),
         "warmup_results": c.get("warmup_rows"), "warmup_max_ms": c.get("warmup_max_ms"),
         "min_ms": c.get("latency_min_ms"), "p50_ms": c.get("latency_p50_ms"), "p99_ms": c.get("latency_p99_ms"),
         "max_ms": c.get("latency_max_ms"), "from_ack_p50_ms": c.get("from_ack_p50_ms"),
         "from_ack_p99_ms": c.get("from_ack_p99_ms"), "rows": c["rows"], "expected_rows": n,
         "differing_from_expected": c["differing_from_expected"], "complete": not w.get("timeout"),
         "dropped": stopped.get("dropped_records"), "peak_rss_mb": round(stopped["vm_hwm_kb"] / 1024),
         # the whole machine while the producer ran: near 100 the engine, broker and producer share too few cores
         "machine_cpu_busy_pct": round(100 * (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]), 1)}
    if stopped.get("failure"):
        r["failure"] = stopped["failure"]
    if side in SPARK_SIDES:
        if stopped.get("sink_producer"):
            r["sink_producer"] = stopped["sink_producer"]
        b = stopped.get("batches") or []
        r["micro_batches"] = len(b)
        if b:
            r["median_batch_ms"] = statistics.median(x["ms"] for x in b)
            # each batch's phases (Spark's durationMs): where a real-time batch switch spends its time
            r["batches"] = b
    if q == "count":
        starts = [x["start_ms"] for x in stopped.get("batches") or [] if x.get("start_ms")]
        r["where_the_time_goes"] = where_the_time_goes(d / "windows", d / "closes", starts, c.get("warmup_window"),
                                                       c.get("warmup_until"))
    return r


def rate_search(side: str, q: str, a: argparse.Namespace, work: Path, bs: str) -> dict[str, Any]:
    """Rates from --rate-search-start up by --rate-search-step, --rate-search-duration-s each, until one
    misses: p99 above --rate-search-p99-ms, rows differing or missing, or the producer itself more
    than 5 % short of the rate (then the machine, not the side, is the limit: said so). The highest
    rate that held is the figure."""
    tries: list[dict[str, Any]] = []
    held, why = 0, "reached --rate-search-max"
    for rate in range(a.rate_search_start, a.rate_search_max + 1, a.rate_search_step):
        r = fixed_rate(side, q, a, work, bs, f"search-{q}-{side}-{rate}", rate, a.rate_search_duration_s)
        tries.append(r)
        print(f"   rate search {q}/{side} {rate}/s: p50 {r['p50_ms']} p99 {r['p99_ms']} max {r['max_ms']} ms, "
              f"timed {r['results_timed']}, achieved {r['achieved_rate']:.0f}/s, differing {r['differing_from_expected']}, "
              f"complete {r['complete']}, dropped {r['dropped']}")
        if r["achieved_rate"] < 0.95 * rate:
            why = f"the producer reached only {r['achieved_rate']:.0f}/s at {rate}/s (machine limit, not the side's)"
            break
        if r["differing_from_expected"] or not r["complete"] or not r["results_timed"]:
            why = f"{rate}/s: rows differing ({r['differing_from_expected']}) or incomplete or none timed"
            break
        if r["p99_ms"] > a.rate_search_p99_ms:
            why = f"{rate}/s: p99 {r['p99_ms']} ms > {a.rate_search_p99_ms} ms"
            break
        held = rate
    return {"held_rate": held, "stopped_because": why, "tries": tries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated, of " + ",".join(QUERIES))
    ap.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {','.join(SIDES)} ({SL}: "
                    f"sluice's product defaults; {SLX}: the same with every experimental rewrite on; "
                    f"{SL}+FLAG (e.g. {SL}+json-decoder): the defaults with that one rewrite on, on the queries "
                    f"it changes; {RT}: the count, q7 and q8, the other queries run without it)")
    ap.add_argument("--events", type=int, default=10_000_000, help="Nexmark backlog events (and count records)")
    ap.add_argument("--count-records", type=int, default=0, help="the count's backlog (default --events; keys: a tenth)")
    ap.add_argument("--event-rate", type=int, default=10_000,
                    help="Nexmark events per second of event time (Nexmark's default first event rate)")
    ap.add_argument("--lateness-ms", type=int, default=60_000,
                    help="Nexmark queries: allowed lateness (Kafka Streams grace, Flink's bounded out-of-orderness, "
                         "Spark's watermark delay)")
    ap.add_argument("--count-grace-ms", type=int, default=10_000, help="the count's grace / watermark delay")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="drain runs per side (0: none, only the fixed-rate runs)")
    ap.add_argument("--warmup-events", type=int, default=50_000, help="a separate backlog each side drains first, "
                    "unmeasured, per query (0: none)")
    ap.add_argument("--heap", default="4g", help="max heap of every side")
    ap.add_argument("--jfr", default="", help="a folder: every side's JVM records a Java Flight Recording there "
                    "(summarise with bench/jfr_top.py; for profiles, not figures)")
    ap.add_argument("--rate", type=int, default=50_000, help="fixed-rate run: events/s (0: skip)")
    ap.add_argument("--duration-s", type=int, default=135,
                    help="fixed-rate run: seconds (>= 130: two 1-minute windows close, the first the warm-up)")
    ap.add_argument("--count-window-ms", type=int, default=60_000,
                    help="the count's tumbling window (every side but flink-sql; the README's batch-switch run: 1000)")
    ap.add_argument("--rate-warmup-s", type=int, default=0,
                    help="fixed-rate run: the windows starting in this many seconds after the first are set apart "
                         "with it as the warm-up (0: the first window only)")
    ap.add_argument("--rate-keys", type=int, default=0,
                    help="the count's keys at a fixed rate (default a tenth of one window's records: rate * 6)")
    ap.add_argument("--rate-disorder-ms", type=int, default=2000,
                    help="the count at a fixed rate: event time = send time - up to this (0: in order)")
    ap.add_argument("--rate-lateness-ms", type=int, default=10_000,
                    help="Nexmark queries' allowed lateness in the fixed-rate runs (a live stream needs less than a "
                         "drain; rows are compared for windows closing 2 x (10 s + this) + 2 s before the end)")
    ap.add_argument("--rate-search", action="store_true",
                    help="the count: the highest rate each of --rate-search-sides holds with p99 <= --rate-search-p99-ms")
    ap.add_argument("--rate-search-sides", default=f"{RT},{KSL}")
    ap.add_argument("--rate-search-start", type=int, default=50_000)
    ap.add_argument("--rate-search-step", type=int, default=50_000)
    ap.add_argument("--rate-search-max", type=int, default=500_000)
    ap.add_argument("--rate-search-duration-s", type=int, default=135,
                    help="per rate tried (>= 130 s: two 1-minute windows then close on real records, the first "
                         "of them the warm-up)")
    ap.add_argument("--rate-search-p99-ms", type=int, default=100)
    ap.add_argument("--rt-p99-target-ms", type=int, default=0,
                    help="target: the real-time side's p99 at --rate (0: the one set for the run's shape, "
                         "rt_p99_target_ms)")
    ap.add_argument("--ks-commit-ms", type=int, default=1000, help="Kafka Streams commit.interval.ms (see README)")
    ap.add_argument("--ks-lowlat-commit-ms", type=int, default=10,
                    help=f"{KSL}: commit.interval.ms (its record cache is 0)")
    ap.add_argument("--rebalance-delay-ms", type=int, default=0,
                    help="the broker's group.initial.rebalance.delay.ms (the project's test broker: 0; Kafka's default 3000)")
    ap.add_argument("--ks-threads", type=int, default=2, help="Kafka Streams num.stream.threads (see README: 1 "
                    "keeps its tasks in step on a small or loaded run)")
    ap.add_argument("--ks-cache-bytes", type=int, default=10 * 1024 * 1024, help=f"{KS}: statestore.cache.max.bytes")
    ap.add_argument("--flink-checkpoint-ms", type=int, default=10_000, help="Flink checkpoint interval (0: off)")
    ap.add_argument("--trigger", default="0", help="sluice's processing-time trigger (0: Spark's default)")
    ap.add_argument("--max-offsets", type=int, default=0, help="sluice's maxOffsetsPerTrigger (0: not set)")
    # sluice's experimental rewrites (opt-in), for ad-hoc runs of the `sluice` and `sluice-rt` sides; each
    # defaults to sluice's product default. The `sluice-exp` side turns them all on whatever these say.
    ap.add_argument("--json-decoder", default="spark", choices=["sluice", "spark"],
                    help="experimental, json_decoder (spark.sluice.json.decoder): who parses from_json's input on the "
                         "Nexmark queries, Spark's own parser (the default) or sluice from the record's bytes")
    ap.add_argument("--sink-option", action="append", default=[],
                    help="KEY=VALUE, repeatable: an option of the Spark sides' Kafka sink (e.g. kafka.linger.ms=0)")
    ap.add_argument("--source-option", action="append", default=[],
                    help="KEY=VALUE, repeatable: an option of the Spark sides' Kafka source (e.g. kafka.max.poll.records=20000)")
    ap.add_argument("--spark-conf", action="append", default=[],
                    help="KEY=VALUE, repeatable: a Spark setting of the Spark sides' sessions (printed with their settings)")
    ap.add_argument("--stamp-emit", action="store_true",
                    help="the count on Spark's sides: key each result by the wall clock at which the projection above "
                         "suppress passed it on, so that where_the_time_goes splits a window's first result into the "
                         "wait until suppress emitted it (first_emit) and the sink's write (emit_to_append)")
    ap.add_argument("--rt-sink-linger-ms", type=int, default=5,
                    help=f"{RT}: the Kafka sink's kafka.linger.ms (-1: the producer's default, 0), so that a window's "
                         "finals, due at once, leave in one request")
    ap.add_argument("--rt-checkpoint", default="5 seconds",
                    help=f"{RT}: trigger(realTime=...), the checkpoint interval (not a latency bound)")
    ap.add_argument("--rt-cores", type=int, default=4,
                    help=f"{RT}: local[N]; real-time mode runs every stage's tasks at once: 2 source partitions + "
                         "2 shuffle partitions = 4 slots (on 2 cores)")
    ap.add_argument("--rt-shuffle-wait-ms", type=int, default=5,
                    help=f"{RT}: spark.shuffle.streaming.networkBufferMaxWaitTimeMs (-1: Spark's default, 50 ms), how "
                         "long the real-time shuffle holds a partly filled 32-KB buffer: at 50k/s one fills in roughly "
                         "30-40 ms (estimated: rows of ~70 bytes, ~12k rows/s per reader), a wait the default adds to "
                         "a row's path; Spark's doc: lower values reduce "
                         "latency at the cost of smaller messages)")
    ap.add_argument("--timeout-s", type=int, default=1800, help="per run: output must be complete by then")
    ap.add_argument("--run-bound", type=float, default=10.0, help="a drain run ends incomplete after this many times "
                    "the query's fastest complete drain so far (0: only --timeout-s)")
    ap.add_argument("--run-bound-min-s", type=int, default=300, help="the least a drain run is given under --run-bound")
    ap.add_argument("--idle-s", type=int, default=120, help="per run: give up when the output, once started, has "
                    "not grown for this long without being complete (a side that dropped rows)")
    ap.add_argument("--workdir", default="", help="broker data, checkpoints, rows (default: a temp dir, removed)")
    a = ap.parse_args()
    queries = [q for q in a.queries.split(",") if q]
    sides = [s for s in a.sides.split(",") if s]
    search = [s for s in a.rate_search_sides.split(",") if s] if a.rate_search else []
    bad = [q for q in queries if q not in QUERIES] + [s for s in sides + search if s not in SIDES]
    if bad:
        ap.error(f"unknown: {bad}")
    if search and "count" not in queries:
        ap.error("--rate-search runs on the count: add it to --queries")
    if a.count_window_ms <= 0 or (a.count_window_ms != 60_000 and FLS in sides):
        ap.error(f"--count-window-ms {a.count_window_ms}: a positive window, on sides other than {FLS} "
                 "(its SQL has a 1-minute window)")
    LOG.append(f"-Dpeers.countWindowMs={a.count_window_ms}")  # every JVM the bench starts: sides and tools
    LOG.append(f"-Dpeers.warmupMs={a.rate_warmup_s * 1000}")
    if a.rt_cores < 4:
        print(f"   WARNING: --rt-cores {a.rt_cores} < 4 task slots (2 source + 2 shuffle partitions): real-time "
              "batches cannot run all their tasks at once")

    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="sluice-peers-"))
    if a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    # The project's test broker starts group rebalances at once; --rebalance-delay-ms sets Kafka's
    # default 3 s instead (Kafka Streams' threads then join the first rebalance together).
    broker = kh.Broker(work / "broker", {"group.initial.rebalance.delay.ms": str(a.rebalance_delay_ms)}).start()
    BROKER_PIDS.append(broker.proc.pid)
    try:
        run(a, queries, sides, search, work, broker.bootstrap)
    finally:
        broker.stop()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


def side_settings(a: argparse.Namespace, sides: list[str]) -> dict[str, dict[str, Any]]:
    """Every side's configuration as data (printed at the start, stored in the result file): for the Spark
    sides the spark.sluice.* keys they set and each experimental rewrite on or off, for the others their
    engine's settings."""
    jar = os.path.basename(sluice.jar_path())
    out: dict[str, dict[str, Any]] = {}
    for side in sides:
        if side in (FL, FLS):
            out[side] = {"engine": f"Flink 2.3.0 {'DataStream API' if side == FL else 'SQL (window TVFs)'}",
                         "parallelism": 2, "state backend": "hashmap (Flink's default)",
                         "checkpoint interval ms": a.flink_checkpoint_ms, "kafka connector": "5.0.0-2.2",
                         "heap": a.heap}
        elif side in (KS, KSL):
            out[side] = {"engine": "Kafka Streams 4.1.1", "num.stream.threads": a.ks_threads,
                         "commit.interval.ms": a.ks_commit_ms if side == KS else a.ks_lowlat_commit_ms,
                         "statestore.cache.max.bytes": a.ks_cache_bytes if side == KS else 0,
                         "stores": "in-memory window/session stores, changelogs on", "processing": "at-least-once",
                         "heap": a.heap}
        else:
            flags = rewrite_flags(side, a)
            out[side] = {"engine": f"Spark {PYSPARK_VERSION} + sluice ({jar}), Python API",
                         "mode": "real-time" if side == RT else "micro-batch",
                         "master": f"local[{a.rt_cores}]" if side == RT else "local[2]",
                         "configuration": "sluice's product defaults" if not sluice_keys(side, a) else
                         "every experimental rewrite on" if side == SLX else
                         f"sluice's product defaults with {ONE_REWRITE[side]} alone on" if side in ONE_REWRITE else
                         "experimental rewrites as flagged",
                         "state_store": "Spark's RocksDB (real-time mode's only provider)" if side == RT else
                         "in_memory_window (sluice's in-memory window store)",
                         "spark.sluice.* keys set": sluice_keys(side, a),
                         "experimental rewrites": {opt: ("on" if flags[flag] == on else "off")
                                                   + (f" ({flags[flag]})" if flag == "json-decoder" else "")
                                                   for opt, (flag, on, _) in EXPERIMENTAL.items()},
                         "spark.driver.memory": a.heap, "spark.sql.shuffle.partitions": 2,
                         "trigger": f"realTime={a.rt_checkpoint}" if side == RT else
                         ("default" if a.trigger == "0" else a.trigger),
                         "maxOffsetsPerTrigger": a.max_offsets or "not set",
                         "source options": a.source_option, "sink options": a.sink_option, "spark conf": a.spark_conf}
            if side == RT:
                out[side]["spark.shuffle.streaming.networkBufferMaxWaitTimeMs"] = \
                    "50 (Spark's default)" if a.rt_shuffle_wait_ms < 0 else a.rt_shuffle_wait_ms
                if not any(o.startswith("kafka.linger.ms=") for o in a.sink_option):
                    out[side]["sink kafka.linger.ms"] = \
                        "0 (the producer's default)" if a.rt_sink_linger_ms < 0 else a.rt_sink_linger_ms
    return out


SL_MODE = "at sluice's product defaults"


def settings_of(a: argparse.Namespace, count_records: int, sides: list[str]) -> dict[str, Any]:
    rewrites = ", ".join(f"{opt} ({key})" for opt, (_, _, key) in EXPERIMENTAL.items())
    described = {
        FL: f"Flink 2.3.0 DataStream API, local MiniCluster parallelism 2, state backend hashmap (Flink's default), "
            f"checkpoints every {a.flink_checkpoint_ms} ms (0 = off) to local disk, Kafka connector 5.0.0-2.2, "
            f"-Xmx{a.heap}",
        FLS: f"as {FL}, the queries in Flink SQL (PeersFlinkSql: a kafka table in the json format, the record "
             "timestamp as rowtime with a watermark of the allowed lateness; window TVFs: aggregations, window Top-N, "
             "a window join; planner options Flink's defaults), its drain clock started before the planner "
             "optimizes the query",
        KS: f"Kafka Streams 4.1.1, {a.ks_threads} stream thread(s), in-memory window/session stores, "
            "suppress(untilWindowCloses(unbounded())), at-least-once, changelogs on, "
            f"commit.interval.ms {a.ks_commit_ms}, statestore.cache.max.bytes {a.ks_cache_bytes}, -Xmx{a.heap}",
        KSL: f"as {KS}, at its lowest-latency settings: commit.interval.ms {a.ks_lowlat_commit_ms}, "
             "statestore.cache.max.bytes 0 (every update reaches suppress at once)",
        SL: f"Spark {PYSPARK_VERSION} local[2] micro-batch + sluice (Python API, {os.path.basename(sluice.jar_path())}) "
            f"{SL_MODE if not sluice_keys(SL, a) else 'with experimental rewrites as flagged'}: "
            "spark.sluice.* keys set "
            f"{sluice_keys(SL, a) or 'none'} beside state_store=in_memory_window; spark.driver.memory={a.heap}, "
            "shuffle partitions 2, suppress(until_window_closes(unbounded())) fused (q11: over an update-mode "
            f"session_window), trigger {'default' if a.trigger == '0' else a.trigger}, maxOffsetsPerTrigger "
            f"{a.max_offsets or 'not set'}, Kafka source options "
            f"{', '.join(a.source_option) or 'none beyond the subscription (Spark defaults)'}",
        SLX: f"the {SL} pipeline with every experimental rewrite of sluice on ({rewrites}): spark.sluice.* keys set "
             f"{sluice_keys(SLX, a)} beside state_store=in_memory_window",
        **{side: f"the {SL} pipeline at sluice's product defaults with one experimental rewrite on, "
                 f"{ONE_REWRITE[side]}: spark.sluice.* keys set {sluice_keys(side, a)} beside "
                 f"state_store=in_memory_window; run on {', '.join(ONE_REWRITE_QUERIES[ONE_REWRITE[side]])}"
           for side in ONE_REWRITE},
        RT: f"the {SL} pipeline with trigger(realTime='{a.rt_checkpoint}') (checkpoint interval), "
            f"local[{a.rt_cores}] (2 source + 2 shuffle partitions, all tasks at once), shuffle partitions 2, "
            "spark.shuffle.streaming.networkBufferMaxWaitTimeMs "
            f"{'50 (default)' if a.rt_shuffle_wait_ms < 0 else a.rt_shuffle_wait_ms}, "
            "Spark's RocksDB provider (the only one real-time mode allows), suppress not fused (each window "
            "closed on its partition's stream time, per row), Kafka sink; the count, q7 and q8; spark.sluice.* "
            f"keys set {sluice_keys(RT, a) or 'none'}",
    }
    return {
        "machine": f"{os.cpu_count()} cores; load at start {os.getloadavg()[0]:.2f} (1 min)",
        "spark": PYSPARK_VERSION,
        "sides": ", ".join(sides),
        "broker": "Kafka 3.9.1 KRaft, one node on loopback (tests/support/kafka.py); topics of 2 partitions",
        "nexmark": f"{a.events} events (persons:auctions:bids 1:3:46, Nexmark's hot sellers/auctions/bidders), "
                   f"{a.event_rate} events per second of event time, in order, round-robin over 2 partitions, "
                   f"JSON values, seed {a.seed}; rows compared for the windows that close by last event time - "
                   f"2 x (10 s + lateness) - 2 s (no flush events)",
        "count": f"{count_records} records, {max(1, count_records // 10)} keys Zipf(1.0), 3 h of event time, "
                 "disorder <= 2 s, keyed, one flush record per partition 1 h later; "
                 f"{a.count_window_ms} ms tumbling count per key, "
                 f"grace {a.count_grace_ms} ms; fixed rate: keys {a.rate_keys or 'rate x 6'}, event time = send time "
                 f"- up to {a.rate_disorder_ms} ms; warm-up set apart: the first window"
                 + (f" and those starting within {a.rate_warmup_s} s of it" if a.rate_warmup_s else ""),
        "allowed lateness (Nexmark)": f"{a.lateness_ms} ms on every side (fixed-rate runs: {a.rate_lateness_ms} ms)",
        **{side: described[side] for side in sides},
        "run bound": f"a drain run ends incomplete after {a.run_bound} x the query's fastest complete drain so far "
                     f"(at least {a.run_bound_min_s} s), or after {a.timeout_s} s",
        "drain time": "from the side's start() call (KafkaStreams.start, StreamExecutionEnvironment.executeAsync, "
                      "Flink SQL: StreamTableEnvironment.toDataStream, DataStreamWriter.start; process start "
                      "excluded) to the broker LogAppendTime of the last result",
        "latency (count)": "result's broker LogAppendTime - the producer's wall clock at the send of the record that "
                           "closed its window on its key's input partition (from_ack: at that send's acknowledgement); "
                           "windows closed only by the final flush records are not timed",
        "latency (Nexmark)": "result's broker LogAppendTime - window end - lateness (event time = send time)",
        "peak RSS": "VmHWM of the side's JVM (Spark: JVM + Python driver)",
    }


def run(a: argparse.Namespace, queries: list[str], sides: list[str], search: list[str], work: Path, bs: str) -> None:
    count_records = a.count_records or a.events
    h = Harness("peers", "sluice on Spark (micro-batch and real-time) vs Flink vs Kafka Streams: drain, fixed-rate "
                "latency, rate search", settings_of(a, count_records, sides))
    for side, conf in side_settings(a, sides).items():
        print(f"   {side} settings: {json.dumps(conf)}")

    data: dict[str, Data] = {}
    warm: dict[str, Data] = {}
    # Backlogs only for drains (--repeats 0: fixed-rate runs only, which make their own data).
    if a.repeats > 0 and any(q != "count" for q in queries):
        data["nexmark"] = make_nexmark(a, work, bs, "nexmark", a.events, a.seed, a.event_rate)
        print(f"   nexmark backlog: {data['nexmark'].summary}")
        if data["nexmark"].summary["cut_ms"] < data["nexmark"].summary["first_ts"] + 30_000:
            print("   WARNING: the backlog spans too little event time for the lateness: few or no windows close "
                  "by the cut (more --events, a lower --event-rate or a smaller --lateness-ms)")
        if a.warmup_events:
            # Spread over 2 x the cut's margin of event time, so that the warm-up has windows to close.
            rate = max(1, a.warmup_events * 1000 // (4 * (10_000 + a.lateness_ms) + 10_000))
            warm["nexmark"] = make_nexmark(a, work, bs, "warm-nexmark", a.warmup_events, a.seed + 1, rate)
    if a.repeats > 0 and "count" in queries:
        data["count"] = make_count(a, work, bs, "count-in", count_records, a.seed, 3 * 3600)
        print(f"   count backlog: {data['count'].summary}")
        if a.warmup_events:
            warm["count"] = make_count(a, work, bs, "warm-count", a.warmup_events, a.seed + 1, 1800)

    def family(q: str) -> str:
        return "count" if q == "count" else "nexmark"

    comparisons: dict[str, Any] = {}
    side_config: dict[str, Any] = {}
    latency: dict[str, list[dict[str, Any]]] = {}
    searches: dict[str, dict[str, Any]] = {}
    for qi, q in enumerate(queries):
        qsides = [s for s in sides if supports(s, q)]
        if len(qsides) < len(sides):
            print(f"   {q}: without {[s for s in sides if s not in qsides]} (see supports())")
        names = [f"{q}/{s}" for s in qsides]

        def warmup(name: str, q: str = q) -> None:
            side = name.split("/")[1]
            r = drain(side, q, a, work, bs, warm[family(q)], f"warm-{q}-{side}")
            print(f"   warm-up {name}: {r['drain_s']} s, differing {r['differing_from_expected']}")

        fastest: list[float] = []

        def one(name: str, i: int, q: str = q) -> dict[str, Any]:
            # A run may take --run-bound times the query's fastest complete drain so far (Kafka Streams'
            # q11 drains at about 17k events/s: 10 minutes and more a run, README), then ends incomplete.
            bound = min(a.timeout_s, max(a.run_bound_min_s, round(a.run_bound * min(fastest)))) \
                if fastest and a.run_bound > 0 else a.timeout_s
            r = drain(name.split("/")[1], q, a, work, bs, data[family(q)], f"{q}-{name.split('/')[1]}-{i}", bound)
            if r["complete"] and r["drain_s"] == r["drain_s"]:  # not NaN: the run had output
                fastest.append(r["drain_s"])
            r["bound_s"] = bound
            return r

        if a.repeats > 0 and names:
            runs = h.alternating(names, a.repeats, one, warmup=warmup if warm else None)
            for name in names:
                print(f"   {name} settings: {json.dumps(runs[name][0]['config'])}")
            for s in SPARK_SIDES:
                for r in runs.get(f"{q}/{s}", []):
                    b = r.get("batches") or []
                    print(f"   {q}/{s} batches (rows, ms): {[(x['rows'], x['ms']) for x in b][:20]}")
            # Every run against the generator's reference and against the first run of the first side.
            ref = runs[names[0]][0]["rows_file"]
            cross = {name: [tool("diff", ref, r["rows_file"]) for r in runs[name]] for name in names}
            worst = max([r["differing_from_expected"] for n in names for r in runs[n]]
                        + [d["differing"] for n in names for d in cross[n]])
            print(f"   {q}: expected rows {runs[names[0]][0]['expected_rows']}; differing from the reference: "
                  f"{ {n: [r['differing_from_expected'] for r in runs[n]] for n in names} }; from {names[0]} "
                  f"repeat 1: { {n: [d['differing'] for d in cross[n]] for n in names} }; late drops: "
                  f"{ {n: [r['dropped'] for r in runs[n]] for n in names} }")
            for n in names:
                for d in cross[n]:
                    if d["differing"]:
                        print(f"     {n} vs {names[0]}: {d['examples']}")
            med = {n: statistics.median(r["events_per_s"] for r in runs[n]) for n in names}
            print(f"   {q}: median drain events/s " + ", ".join(f"{n} {v:.0f}" for n, v in med.items())
                  + "; peak RSS MB " + ", ".join(f"{n} {[r['peak_rss_mb'] for r in runs[n]]}" for n in names))
            # Not a target: where each side's CPU went during its drains (cpu_split.py).
            print(f"   {q}: CPU core-s over the drain, median of runs (cpu_split.py): "
                  + "; ".join(f"{n} {cpu_summary(runs[n])}" for n in names))
            warm_med = {n: statistics.median(r["warm_events_per_s"] for r in runs[n]) for n in names
                        if all(r.get("warm_events_per_s") for r in runs[n])}
            if warm_med:
                # Not a target: the drain's second half, where each side's start no longer counts (README).
                print(f"   {q}: median warm drain events/s (second half of the backlog) "
                      + ", ".join(f"{n} {v:.0f}" for n, v in warm_med.items())
                      + "".join(f"; {n} / {m} {warm_med[n] / warm_med[m]:.3f}" for n in warm_med for m in warm_med
                                if n.split("/")[1] in SLUICE_MB and m != n and warm_med[m] > 0))
                print(f"   {q}: {start_costs(runs, warm_med, data[family(q)].events)}")

            def ratio(x: str, y: str, bound: float) -> None:
                if x in qsides and y in qsides and med[f"{q}/{y}"] > 0:
                    # A run that lost rows (or stopped incomplete) did less work: say so beside the ratio.
                    bad = {n: sum(1 for r in runs[n] if r["differing_from_expected"] or not r["complete"])
                           for n in (f"{q}/{x}", f"{q}/{y}")}
                    note = "" if not any(bad.values()) else " [runs with differing rows or incomplete: " + \
                        ", ".join(f"{n} {k} of {len(runs[n])}" for n, k in bad.items() if k) + "]"
                    h.target(f"{q}: {x} / {y} drain throughput (median events/s {med[f'{q}/{x}']:.0f} / "
                             f"{med[f'{q}/{y}']:.0f}){note}", med[f"{q}/{x}"] / med[f"{q}/{y}"], ">=", bound)

            for mine in SLUICE_MB:
                for other in COMPARATORS:
                    ratio(mine, other, 1.0)
            ratio(RT, SL, 0.5)  # real-time drains at least half as fast as micro-batch
            if SL in qsides and SLX in qsides and med[f"{q}/{SL}"] > 0:
                # Not a target: what the experimental rewrites give over the product defaults.
                print(f"   {q}: {SLX} / {SL} median drain events/s {med[f'{q}/{SLX}'] / med[f'{q}/{SL}']:.3f}")
            for one in [s for s in ONE_REWRITE if s in qsides and SL in qsides and med[f"{q}/{SL}"] > 0]:
                # A rewrite's decision asks for a gain beyond the run-to-run spread: the larger relative
                # range (max - min) / median of its side's drains and of the defaults' in this run.
                sp = spread(*([r["events_per_s"] for r in runs[f"{q}/{n}"]] for n in (SL, one)))
                h.target(f"{q}: {one} / {SL} drain throughput beyond the spread (median events/s "
                         f"{med[f'{q}/{one}']:.0f} / {med[f'{q}/{SL}']:.0f}, spread {sp:.3f})",
                         med[f"{q}/{one}"] / med[f"{q}/{SL}"], ">=", round(1 + sp, 3))
            h.target(f"{q}: differing rows, worst drain run (vs reference and vs {names[0]})", float(worst), "<=", 0.0)
            comparisons[q] = {n: [d["differing"] for d in cross[n]] for n in names}
            for n in names:
                # Each side's own settings (as it printed them), once per query in the result file.
                side_config[n] = runs[n][0].get("config")
                for r in runs[n]:
                    r.pop("config", None)
        if a.rate:
            for side in (qsides if qi % 2 == 0 else list(reversed(qsides))):
                r = fixed_rate(side, q, a, work, bs, f"lat-{q}-{side}", a.rate, a.duration_s)
                latency.setdefault(f"{q}/{side}", []).append(r)
                print(f"   latency {q}/{side}: " + ", ".join(f"{k}={v}" for k, v in r.items()))
            lat = {s: latency[f"{q}/{s}"][-1] for s in qsides}
            print(f"   {q} at {a.rate}/s for {a.duration_s} s, latency ms (p50 / p99 / max; from ack p50 / p99), "
                  "results timed: " + "; ".join(
                      f"{s} {r['p50_ms']} / {r['p99_ms']} / {r['max_ms']}; {r['from_ack_p50_ms']} / "
                      f"{r['from_ack_p99_ms']}, {r['results_timed']}" for s, r in lat.items()))
            if RT in lat:
                rt = lat[RT]
                bound, why = rt_p99_target_ms(a)
                h.target(f"{q}: {RT} p99 latency ms at {a.rate}/s (target: {why})"
                         + ("" if rt["complete"] and rt["results_timed"] else " [incomplete or nothing timed]"),
                         float(rt["p99_ms"] if rt["p99_ms"] is not None else float("inf")), "<=", bound)
            h.target(f"{q}: differing rows, worst fixed-rate run (each vs its own generator's rows)",
                     float(max(r["differing_from_expected"] + (0 if r["complete"] else 1) for r in lat.values())),
                     "<=", 0.0)
        if q == "count" and search:
            for side in [s for s in search if supports(s, q)]:
                searches[side] = rate_search(side, q, a, work, bs)
                print(f"   rate search {q}/{side}: highest rate with p99 <= {a.rate_search_p99_ms} ms: "
                      f"{searches[side]['held_rate']}/s ({a.rate_search_duration_s} s per rate; stopped: "
                      f"{searches[side]['stopped_because']})")
    if latency.get(f"count/{RT}") or searches:
        # The count's low-latency figures side by side.
        print("   == count, real-time vs the others:")
        for s in [x for x in SIDES if f"count/{x}" in latency or x in searches]:
            r = (latency.get(f"count/{s}") or [{}])[-1]
            held = searches.get(s, {}).get("held_rate")
            print(f"      {s:14} p50 {r.get('p50_ms')} p99 {r.get('p99_ms')} max {r.get('max_ms')} ms at {a.rate}/s "
                  f"(warm-up window: {r.get('warmup_results')} results, max {r.get('warmup_max_ms')} ms)"
                  + (f"; holds {held}/s at p99 <= {a.rate_search_p99_ms} ms" if held is not None else ""))
    h.write(data={k: v.summary for k, v in data.items()}, latency=latency, rate_search=searches,
            differing_vs_first=comparisons, sides=sides, side_settings=side_settings(a, sides),
            side_config=side_config)


if __name__ == "__main__":
    main()
