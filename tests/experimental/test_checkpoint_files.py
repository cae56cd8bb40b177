"""Checkpoint files written directly (``checkpoint_local_direct``): Spark's own checkpoint files on the
local file system (offset and commit logs, state store files) written by sluice's checkpoint file
manager with java.nio. The manager never writes Hadoop's checksum files (``.<name>.crc``), which
Spark's own manager writes beside every file on the checksummed local file system these tests run
on: a checkpoint without them was written by sluice's manager alone (RocksDB's SST files aside, which
Spark's RocksDB provider copies with Hadoop's FileSystem API).

Each query here is a final-results query (a windowed count under sluice's suppress), on Spark's
HDFS-backed and RocksDB providers and sluice's in-memory window store, killed or stopped and
restarted on its checkpoint, with the setting on, off and on again.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice._conf import state_store_providers
from support.children import kill_after_batches
from support.inputs import hourly_finals, write_hourly_files
from support.session import fresh_builder, sluice_session, stop_session
from support.sinks import drain_to_files, emitted_finals, hadoop_checksums
from support.suppress_kill_child import file_sink, final_results

# dev/test: run on every supported Spark minor
pytestmark = pytest.mark.every_minor

DIRECT = "spark.sluice.checkpoint.local.direct"
MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
PROVIDERS = state_store_providers()  # hdfs, rocksdb, in_memory_window
T0 = datetime(2026, 1, 1)


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f")


def hour_start(h: int) -> str:
    return (T0 + timedelta(hours=h)).isoformat()


def session(direct: bool) -> SparkSession:
    return sluice_session(checkpoint_local_direct=direct)


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    return request.param


def test_a_killed_query_restarts_on_files_written_directly(provider: str, tmp_path: Path) -> None:
    """SIGKILL a query's whole process mid-stream, restart it here on the same checkpoint: every final
    result arrives exactly once, and every checkpoint file was written by sluice's manager."""
    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    hours = 8
    write_hourly_files(src, hours, ts)
    kill_after_batches("suppress_kill_child.py", [str(src), str(ckpt), str(out), PROVIDERS[provider], "",
                                                 f"{DIRECT}=true"], out, batches=4)
    assert len(list(out.glob("*.json"))) < hours  # killed mid-stream, not after the end
    assert (ckpt / "offsets").is_dir() and hadoop_checksums(ckpt) == []

    spark = session(direct=True)
    drain_to_files(spark, final_results(spark, str(src)), file_sink(str(out)), ckpt, {PROVIDER_KEY: PROVIDERS[provider]})
    assert emitted_finals(out) == hourly_finals(hours, hour_start)
    assert hadoop_checksums(ckpt) == []
    assert any((ckpt / "state").rglob("*")), "the state stores wrote their files under the checkpoint"


def test_a_checkpoint_continues_with_the_setting_off_and_on_again(provider: str, tmp_path: Path) -> None:
    """Files written directly are read by Spark's own manager and the other way round: the same
    checkpoint runs with the setting on, off and on again, each run restarted on what the last wrote."""
    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()

    def run(direct: bool, hours: range) -> None:
        write_hourly_files(src, hours, ts)
        spark = session(direct)
        drain_to_files(spark, final_results(spark, str(src)), file_sink(str(out)), ckpt,
                       {PROVIDER_KEY: PROVIDERS[provider]})

    run(True, range(0, 3))
    assert hadoop_checksums(ckpt) == []
    run(False, range(3, 6))
    written_by_spark = hadoop_checksums(ckpt)
    assert any(c.startswith("offsets/") for c in written_by_spark), written_by_spark
    run(True, range(6, 9))
    assert hadoop_checksums(ckpt) == written_by_spark, "nothing written since the restart has a checksum"
    assert emitted_finals(out) == hourly_finals(9, hour_start)


def test_another_checkpoint_file_manager_is_refused_at_session_start() -> None:
    stop_session()
    builder = sluice.configure(fresh_builder().master("local[1]").config(MANAGER_KEY, "com.example.S3Manager"),
                               checkpoint_local_direct=True)
    with pytest.raises(sluice.SluiceConfError) as info:
        builder.getOrCreate()
    message = str(info.value)
    assert f"{DIRECT}=true" in message and f"{MANAGER_KEY}=com.example.S3Manager" in message, message
    assert "\n" not in message
    assert SparkSession.getActiveSession() is None
