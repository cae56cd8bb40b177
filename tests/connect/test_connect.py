"""Spark Connect: suppress, the conf keys and sluice's errors over a Connect server.

The Connect side runs in a child process (tests/support/connect_client.py): it starts a local Connect
server with ``sluice.configure(SparkSession.builder.remote("local[2]"))`` and runs its scenarios
on input this module writes; the tests check its results against expectations computed here and,
for errors, against what the classic API raises in this process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice import BufferConfig, Suppressed
from sluice._connect import encode
from support import kafka as kh
from support.connect_client import KAFKA_BOOTSTRAP, WATERMARK_DELAY_S, WINDOW_S, describe, misuse_cases

# dev/test: the marker dev/test selects this module by
pytestmark = pytest.mark.connect
SUPPORT = Path(__file__).resolve().parents[1] / "support"  # the child processes' scripts

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
# (seconds after T0, user), one list per file and micro-batch. Every event is later than the
# watermark its batch runs with, so none is dropped as late.
FINAL_BATCHES = [[(0, "a"), (5, "a"), (20, "b")],
                 [(30, "a"), (65, "b"), (100, "c")],
                 [(110, "a"), (185, "b")]]
# Sessions (gap 5 s): a@5 bridges a's [0, 6) and [10, 15); c's events close everything before them.
SESSION_BATCHES = [[(0, "a"), (1, "a"), (3, "b")], [(10, "a")], [(5, "a")], [(60, "c")], [(120, "c")]]
INTERVAL_BATCHES = [[f"k{i}" for i in range(6)] * 2, [f"k{i}" for i in range(4)] * 3, [f"k{i}" for i in range(2, 6)]]
CLIENT_TIMEOUT_S = 300


def write_batches(folder: Path, rows_per_file: list[list[dict]]) -> None:
    """One JSON file per batch, with increasing modification times (the file source's order)."""
    folder.mkdir(parents=True)
    for i, rows in enumerate(rows_per_file):
        path = folder / f"{i:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        t = T0.timestamp() + 10 * i
        os.utime(path, (t, t))


def event(seconds: int, user: str) -> dict:
    return {"ts": (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S"), "user": user}


def expected_final_counts(batches: list[list[tuple[int, str]]]) -> list[list]:
    """One row per window and user whose window the last watermark closed, with its full count."""
    watermark = max(t for b in batches for t, _ in b) - WATERMARK_DELAY_S
    counts = Counter((t // WINDOW_S * WINDOW_S, user) for b in batches for t, user in b)
    start0 = int(T0.timestamp())
    return sorted([start0 + start, user, n] for (start, user), n in counts.items() if start + WINDOW_S <= watermark)


class ConnectClient:
    """The child process and, once it has finished, its results by scenario."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.log = work / "client.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(SUPPORT / "connect_client.py"), str(work)],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._results: dict[str, Any] | None = None

    def result(self, scenario: str) -> Any:
        if self._results is None:
            try:
                self.proc.wait(timeout=CLIENT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.close()
            path = self.work / "results.json"
            if not path.exists():
                pytest.fail(f"the Connect client wrote no results (exit {self.proc.returncode}); "
                            f"log tail:\n{self.log.read_text()[-4000:]}")
            self._results = json.loads(path.read_text())
        got = self._results.get(scenario)
        if got is None or "error" in got:
            pytest.fail(f"scenario {scenario} failed in the Connect client:\n{(got or {}).get('error')}")
        return got["ok"]

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectClient]:
    work = tmp_path_factory.mktemp("connect")
    write_batches(work / "final_in", [[event(t, u) for t, u in b] for b in FINAL_BATCHES])
    write_batches(work / "session_in", [[event(t, u) for t, u in b] for b in SESSION_BATCHES])
    write_batches(work / "interval_in", [[{"k": k} for k in b] for b in INTERVAL_BATCHES])
    broker = kh.Broker(work / "kafka").start() if kh.spark_minor() >= "4.3" else None  # real_time_finals
    if broker:
        (work / KAFKA_BOOTSTRAP).write_text(broker.bootstrap)
    c = ConnectClient(work)  # starts now; the tests below wait for it when they need its results
    yield c
    c.close()
    if broker:
        broker.stop()


# --- no Spark needed ---------------------------------------------------------------------------

def test_configure_registers_the_relation_plugin_and_keeps_sluices_plugin_on_a_local_server() -> None:
    key = "spark.connect.extensions.relation.classes"
    classic = sluice.configure(SparkSession.builder.config(key, "x.Other"))._options
    assert classic[key] == "x.Other,sluice.connect.SuppressRelationPlugin"
    assert "spark.plugins.defaultList" not in classic
    # pyspark starts a local Connect server with spark.plugins replaced by Connect's own plugin
    local = sluice.configure(SparkSession.builder.remote("local[2]"))._options
    assert local["spark.plugins.defaultList"] == "sluice.plugin.SluicePlugin"
    assert local[key] == "sluice.connect.SuppressRelationPlugin"
    assert "spark.plugins.defaultList" not in sluice.configure(SparkSession.builder.remote("sc://host:1"))._options


def test_the_extension_message_is_the_documented_protobuf_message() -> None:
    """Decodes sluice._connect's hand-written bytes with protobuf, against the schema documented in
    sluice.connect.SuppressRelation."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="sluice_suppress_test.proto", package="sluice.connect",
                                               syntax="proto3")
    message = proto.message_type.add(name="Suppress")
    for number, name, kind in [(1, "input", F.TYPE_BYTES), (2, "kind", F.TYPE_STRING), (3, "limit_ms", F.TYPE_INT64),
                               (4, "max_records", F.TYPE_INT64), (5, "max_bytes", F.TYPE_INT64),
                               (6, "when_full", F.TYPE_STRING), (7, "name", F.TYPE_STRING),
                               (8, "time_col", F.TYPE_STRING), (9, "grace_ms", F.TYPE_INT64),
                               (10, "late_path", F.TYPE_STRING), (11, "late_format", F.TYPE_STRING)]:
        message.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    # map<string, string> late_options = 12: a repeated nested entry type marked as a map entry
    entry = message.nested_type.add(name="LateOptionsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    message.field.add(name="late_options", number=12, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".sluice.connect.Suppress.LateOptionsEntry")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("sluice.connect.Suppress"))

    limited = Suppressed.until_time_limit(timedelta(minutes=5), BufferConfig.max_bytes(1 << 40).with_max_records(7)
                                          .spill_to_disk_when_full()).with_name("alerts")
    m = cls.FromString(encode(b"\x00child\xff" * 300, **limited._wire(), time_col="window.end"))
    assert (m.input, m.kind, m.limit_ms, m.max_records, m.max_bytes, m.when_full, m.name, m.time_col) == (
        b"\x00child\xff" * 300, "until_time_limit", 300_000, 7, 1 << 40, "spill_to_disk", "alerts", "window.end")
    final = cls.FromString(encode(b"", **Suppressed.until_window_closes(BufferConfig.unbounded())._wire()))
    # an unbounded buffer, no name and no time_col are absent fields
    assert (final.kind, final.when_full, final.ListFields()[-1][0].name) == ("until_window_closes", "shut_down",
                                                                           "when_full")
    assert not any(f.name in ("max_records", "max_bytes", "name", "time_col") for f, _ in final.ListFields())
    late = cls.FromString(encode(b"", **Suppressed.until_window_closes(BufferConfig.unbounded(), grace=30)
                                 .with_late_records("/late", "json", {"compression": "gzip", "x": "y"})._wire()))
    assert (late.grace_ms, late.late_path, late.late_format, dict(late.late_options)) == (
        30_000, "/late", "json", {"compression": "gzip", "x": "y"})


# --- over Spark Connect --------------------------------------------------------------------------

def test_the_client_runs_on_a_connect_session(client: ConnectClient) -> None:
    assert client.result("session_kind") == {"session": "pyspark.sql.connect.session",
                                             "suppressed": "pyspark.sql.connect.dataframe"}


def test_suppress_emits_exactly_the_final_results_over_connect(client: ConnectClient) -> None:
    got = client.result("final_results")
    expected = expected_final_counts(FINAL_BATCHES)
    assert len(expected) == 5  # windows [0, 60) and [60, 120) closed, [180, 240) open
    assert sorted(got["rows"]) == expected
    assert got["emitted"] == len(expected)
    assert got["suppressed"] > 0  # window [0, 60) was updated in two batches before it closed


def test_session_windows_in_update_mode_over_connect(client: ConnectClient) -> None:
    """The Connect server's session runs sluice's session updates: the rows, applied to a table keyed
    by (user, session) (a null count deletes), build Spark's own append-mode result, as suppress's
    final results do; the bridged session's two parts were retracted."""
    got = client.result("session_windows")
    table: dict = {}
    for user, s, e, n in got["updates"]:
        if n is None:
            del table[(user, s, e)]
        else:
            table[(user, s, e)] = n
    append = {(user, s, e): n for user, s, e, n in got["append"]}
    closed = max(e for _, _, e in append)
    assert {k: v for k, v in table.items() if k[2] <= closed} == append
    assert sorted(map(tuple, got["finals"])) == sorted((*k, v) for k, v in append.items())
    t0 = int(T0.timestamp())
    assert sum(n is None for *_, n in got["updates"]) == 2 and ("a", t0, t0 + 15) in append


@pytest.mark.spark("4.3", reason="stateful real-time mode arrived in Spark 4.3")
@pytest.mark.kafka
def test_suppress_emits_each_final_result_once_under_the_real_time_trigger_over_connect(client: ConnectClient) -> None:
    got = client.result("real_time_finals")
    assert len(got["expected"]) == 15  # windows ending at 10..50 s closed, 3 keys each
    assert got["rows"] == got["expected"]


def test_misuse_raises_the_classic_apis_errors_over_connect(client: ConnectClient, spark: SparkSession,
                                                           tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    classic = {}
    for name, call in misuse_cases(spark, tmp_path / "in").items():
        with pytest.raises(Exception) as info:
            call()
        classic[name] = describe(info.value)
    assert classic["no_window"]["types"][:2] == ["SluiceSuppressError", "SluiceError"]
    assert "ValueError" in classic["no_window"]["types"]
    assert client.result("misuse") == classic


def test_a_non_update_output_mode_fails_at_start_over_connect(client: ConnectClient) -> None:
    got = client.result("output_mode")
    assert got is not None and "AnalysisException" in got["types"]
    assert "suppress needs the query's output mode to be update, but it is Append" in got["message"]


def test_commit_interval_set_over_connect_holds_updates(client: ConnectClient) -> None:
    """The emission cache is switched on by a session conf only; over Connect the client sets it."""
    got = client.result("commit_interval")
    held_keys = set().union(*INTERVAL_BATCHES)
    updates = sum(len(set(b)) for b in INTERVAL_BATCHES)  # the aggregation's rows, one per key and batch
    assert got == {"rows": 0, "absorbed": updates - len(held_keys), "forwarded": 0}


def test_jvm_only_helpers_fail_clearly_over_connect(client: ConnectClient) -> None:
    got = client.result("jvm_helper")
    assert got is not None and got["types"][0] == "SluiceError"
    assert got["message"].startswith("this needs a classic SparkSession")


def test_the_local_server_loads_sluices_spark_plugin(client: ConnectClient) -> None:
    """pyspark replaces spark.plugins when it starts a local Connect server; configure() keeps
    sluice's plugin in through spark.plugins.defaultList."""
    assert client.result("server_plugin") == {"executors": 1}


def test_a_damaged_suppress_message_fails_its_request_and_the_server_keeps_serving(client: ConnectClient) -> None:
    """A message cut short, and one that is no message, each fail that request in one line saying
    what is wrong, and a bad sluice_suppress argument in SQL fails as in a classic session; then the
    same session and a second one on the server still analyze suppress and run a query."""
    got = client.result("malformed")
    for name in ("cut", "garbage"):
        assert got[name] is not None, f"{name}: the damaged message was accepted"
        line = next((x for x in got[name]["message"].splitlines()
                     if "Invalid sluice suppress relation from the Spark Connect client" in x), None)
        assert line is not None, got[name]["message"]
        assert "not a readable protobuf message" in line
    assert got["sql"] is not None and "unknown mode 'until_later'" in got["sql"]["message"]
    assert got["other_session_differs"]
    after = got["after"]
    assert after["same_session_schema"] == after["other_session_schema"]
    assert after["same_session_schema"].startswith("struct<window:struct<start:timestamp,end:timestamp>")
    assert after["other_session_rows"] == 2
