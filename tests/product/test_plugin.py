"""Foundation: configure(), conf validation at session start, the executor budget split."""
from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice import _conf
from support.metrics import executor_budgets, plugin_gauges
from support.session import BASE_CONF, driver_log, fresh_builder, session_conf, sluice_session, stop_session


def _builder(**conf: str) -> SparkSession.Builder:
    b = fresh_builder().master("local[2]").appName("sluice-conf-tests")
    for k, v in {**BASE_CONF, **conf}.items():
        b = b.config(k, v)
    return b


def test_jar_path_points_at_bundled_jar() -> None:
    import zipfile

    from pyspark.version import __version__
    minor = ".".join(__version__.split(".")[:2])
    assert sluice.jar_path().endswith(f"/sluice-spark-{minor}.jar")
    with zipfile.ZipFile(sluice.jar_path()) as jar:
        assert "sluice/plugin/SluicePlugin.class" in jar.namelist()
        # the seam of the jar's minor is compiled in
        assert "sluice/spark/SparkShim.class" in jar.namelist()


def test_jar_path_chooses_by_spark_version_and_refuses_unsupported_ones() -> None:
    supported = sluice._spark.supported()
    assert supported == ["4.1", "4.2", "4.3"]
    for minor in supported:
        assert sluice.jar_path(minor).endswith(f"/sluice-spark-{minor}.jar")
        assert sluice.jar_path(f"{minor}.9") == sluice.jar_path(minor)
    for bad in ["3.5.1", "4.0.0", "4.4.0", "5.0"]:
        with pytest.raises(sluice.SluiceUnsupportedSparkError) as e:
            sluice.jar_path(bad)
        assert str(e.value) == (f"Spark {bad} is not supported by sluice: supported Spark versions are "
                                "4.1, 4.2, 4.3")
    with pytest.raises(sluice.SluiceUnsupportedSparkError, match="Spark 3.5.1 is not supported"):
        sluice.configure(fresh_builder(), spark_version="3.5.1")
    opts = sluice.configure(fresh_builder(), spark_version="4.2")._options
    assert opts["spark.jars"] == sluice.jar_path("4.2")


def test_configure_sets_plugin_extensions_and_appends_jar() -> None:
    b = fresh_builder().config("spark.jars", "/x/other.jar")
    sluice.configure(b, statestore_cache_max_bytes="64m", commit_interval_ms="30s")
    opts = b._options
    assert opts["spark.jars"] == "/x/other.jar," + sluice.jar_path()
    assert opts["spark.plugins"] == "sluice.plugin.SluicePlugin"
    assert opts["spark.sql.extensions"] == "sluice.plugin.SluiceExtensions"
    assert opts["spark.sluice.statestore.cache.max.bytes"] == str(64 << 20)
    assert opts["spark.sluice.commit.interval.ms"] == "30000"
    sluice.configure(b, state_store_cache=True, json_decoder="sluice")
    assert b._options["spark.sql.streaming.stateStore.providerClass"] == "sluice.cache.CachingStateStoreProvider"
    assert b._options["spark.sluice.json.decoder"] == "sluice"


def test_configure_signature_is_conf_json_options() -> None:
    """configure()'s keyword-only parameters are exactly conf.json's options, and each choice
    option's Literal lists exactly the values conf.json accepts, so an IDE and mypy check what
    the JVM side will accept."""
    import typing

    from sluice import _configure

    assert set(_configure.OPTION_NAMES) == set(_conf.options())
    hints = typing.get_type_hints(sluice.configure)
    keys = {k["option"]: k for k in _conf.spec()["keys"] if "option" in k}

    def literal_values(hint: Any) -> set[str]:
        return {a for arg in typing.get_args(hint) for a in (typing.get_args(arg) or ())
                if isinstance(a, str)} | {a for a in typing.get_args(hint) if isinstance(a, str)}

    for name in _configure.OPTION_NAMES:
        if name in ("state_store", "statestore_cache_delegate"):
            assert literal_values(hints[name]) == set(_conf.state_store_providers()), name
        elif name in keys and keys[name]["form"] == "choice":
            assert literal_values(hints[name]) == set(keys[name]["values"]), name
        elif name in keys and keys[name]["form"] == "boolean" or name == "state_store_cache":
            assert set(typing.get_args(hints[name])) == {bool, type(None)}, name


def test_configure_rejects_unknown_option_and_bad_values_before_spark() -> None:
    with pytest.raises(TypeError, match="statestore_cache_max_byte"):
        sluice.configure(SparkSession.builder, statestore_cache_max_byte=1)
    with pytest.raises(ValueError, match="spark.sluice.statestore.cache.max.bytes"):
        sluice.configure(SparkSession.builder, statestore_cache_max_bytes=-1)
    with pytest.raises(ValueError, match="spark.sluice.input.buffer.max.bytes"):
        sluice.configure(SparkSession.builder, input_buffer_max_bytes=0)
    with pytest.raises(ValueError, match="spark.sluice.commit.interval.ms"):
        sluice.configure(SparkSession.builder, commit_interval_ms="soon")
    with pytest.raises(ValueError, match="spark.sluice.json.decoder.*expected one of"):
        sluice.configure(SparkSession.builder, json_decoder="fast")


@pytest.mark.parametrize("key,value,expect", [
    ("spark.sluice.statestore.cache.max.byte", "1m", "did you mean spark.sluice.statestore.cache.max.bytes"),
    ("spark.sluice.statestore.cache.max.bytes", "-5", "expected a byte size"),
    ("spark.sluice.commit.interval.ms", "whenever", "expected a duration"),
    ("spark.sluice.suppress.fused", "hashed", "expected true or false"),
])
def test_bad_conf_fails_session_start_naming_the_key(key: str, value: str, expect: str) -> None:
    stop_session()
    builder = sluice.configure(_builder(**{key: value}))
    with pytest.raises(sluice.SluiceConfError) as info:
        builder.getOrCreate()
    message = str(info.value)
    assert key in message and f"'{value}'" in message and expect in message
    assert "\n" not in message  # one line, not a JVM stack dump
    assert SparkSession.getActiveSession() is None


def _session_start_log(**conf: str) -> list[str]:
    """What the plugin logged while a session with `conf` started (a new one, never a reused one)."""
    from sluice._conf import PLUGIN_CLASS
    stop_session()
    with driver_log(PLUGIN_CLASS) as lines:
        sluice_session(conf=conf)
        return lines()


def test_alias_and_precedence() -> None:
    old, new = "spark.sluice.cache.max.bytes.buffering", "spark.sluice.statestore.cache.max.bytes"
    assert _session_start_log(**{old: "4m"}) == [f"WARN {old} is deprecated: use {new} instead"]
    budgets = executor_budgets(sluice_session(conf={old: "4m"}))
    assert [b["cache_max_bytes"] for b in budgets.values()] == [4 << 20]

    assert _session_start_log(**{old: "4m", new: "6m"}) == [
        f"WARN {old} is deprecated and ignored: {new} is also set and wins"]
    budgets = executor_budgets(sluice_session(conf={old: "4m", new: "6m"}))
    assert [b["cache_max_bytes"] for b in budgets.values()] == [6 << 20]

    assert _session_start_log(**{new: "6m"}) == []


def test_per_slot_budget_is_total_over_task_slots_local() -> None:
    spark = sluice_session(master="local[2]", statestore_cache_max_bytes="10m")
    (budget,) = executor_budgets(spark).values()
    assert budget["task_slots"] == 2
    assert budget["cache_bytes_per_slot"] == (10 << 20) // 2


def test_multi_process_budget_and_jar_shipped_to_executors() -> None:
    """local-cluster starts two executor JVMs: each loads the plugin from the shipped jar."""
    spark = sluice_session(master="local-cluster[2,1,1024]", statestore_cache_max_bytes="8m",
                           conf={"spark.executor.memory": "512m"})
    budgets = executor_budgets(spark, 2)
    assert len(budgets) == 2, budgets
    for b in budgets.values():
        assert b["task_slots"] == 1
        assert b["cache_bytes_per_slot"] == 8 << 20

    # A task on each executor calls into the shipped jar and reads that executor's slot budget.
    rows = spark.range(0, 8, 1, 8).selectExpr(
        "java_method('sluice.conf.MemoryBudget', 'cacheBytesPerSlot') AS per_slot").collect()
    assert {int(r.per_slot) for r in rows} == {8 << 20}
    stop_session()


def test_gauges_show_the_settings_of_the_session_whose_tasks_ran_last() -> None:
    """A session's input bound and cache budget reach its tasks, and the gauges show them."""
    spark = sluice_session(master="local[2]", statestore_cache_max_bytes="10m")
    with session_conf(spark, {"spark.sluice.input.buffer.max.bytes": str(64 << 20),
                              "spark.sluice.statestore.cache.max.bytes": str(6 << 20)}):
        spark.range(0, 4, 1, 2).collect()
        gauges = plugin_gauges(spark)
        assert (gauges["inputBufferMaxBytes"], gauges["cacheMaxBytes"], gauges["cacheBytesPerSlot"]) == (
            64 << 20, 6 << 20, (6 << 20) // 2)
        assert {b["cache_max_bytes"] for b in executor_budgets(spark).values()} == {6 << 20}
    spark.range(0, 4, 1, 2).collect()
    assert plugin_gauges(spark)["cacheMaxBytes"] == 10 << 20


def test_package_imports_without_a_jvm() -> None:
    import subprocess
    import sys
    code = ("import sluice; from pyspark import SparkContext; "
            "assert SparkContext._gateway is None and SparkContext._jvm is None; print(sluice.jar_path())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sluice.jar_path()


def test_python_parsers_agree_with_the_spec_the_jvm_reads() -> None:
    """sluice/conf.json (inside the jar) is the one table of keys, forms and messages; the Scala
    suite checks the JVM parsers against the same vectors."""
    from sluice import _conf
    forms = _conf.spec()["forms"]
    for text, want in forms["bytes"]["vectors"]:
        assert _conf.parse_bytes(text) == want, text
    for text, want in forms["millis"]["vectors"]:
        assert _conf.parse_millis(text) == want, text
    for text, want in forms["positive_int"]["vectors"]:
        assert _conf.parse_positive_int(text) == want, text
    for text, want in forms["boolean"]["vectors"]:
        assert _conf.parse_boolean(text) == want, text
    for unit, factor in forms["bytes"]["units"].items():
        assert _conf.parse_bytes(f"7{unit.upper()}") == 7 * factor
    for unit, micros in forms["millis"]["units_in_micros"].items():
        assert _conf.parse_millis(f"7000{unit}") == 7000 * micros // 1000
    keys = {_conf.spec()["prefix"] + k["name"] for k in _conf.spec()["keys"]}
    assert {o.key for o in _conf.options().values()} - {_conf.PROVIDER_CLASS_KEY} <= keys

