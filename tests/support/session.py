"""The tests' SparkSession: one local[2] session reused across modules while its settings match, so
the suite pays JVM startup only when a test needs different SparkConf; the options and class path of
every driver JVM the tests start (sessions here, child processes, the Spark Connect server)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

import sluice

# Spark's test mode: Spark checks its own contracts (e.g. that analyzer rules never call a plain
# transform) only when it is on, so every session and child process here runs with it, as
# Spark's own suites and many users' test setups do.
os.environ["SPARK_TESTING"] = "1"

ROOT = Path(__file__).resolve().parents[2]

# dev/test-jvm-options: the options of the JVMs tests start (why: that file).
TEST_JVM_OPTIONS = " ".join(line for line in (ROOT / "dev" / "test-jvm-options")
                            .read_text().splitlines() if line.strip() and not line.startswith("#"))

TEST_CLASS_PATH_ENV = "SLUICE_TEST_CLASS_PATH"


def no_fork_local_fs() -> str:
    """The class path of the test JVMs' local file system (jvm/src/test/java/sluice/testing, the
    classes compiled here against this pyspark, and core-site.xml, which makes them the `file` scheme):
    Hadoop without its native library forks chmod and readlink for every checkpoint file. Empty
    (Hadoop's own, slower) where no javac is found. configure_test_jvms passes it to the sessions and
    child processes through TEST_CLASS_PATH_ENV."""
    import fcntl
    import hashlib
    import shutil

    import pyspark
    sources = sorted((ROOT / "jvm" / "src" / "test" / "java" / "sluice" / "testing").glob("*.java"))
    javac = shutil.which("javac")
    if not sources or javac is None:
        return ""
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in sources)).hexdigest()[:12]
    out = ROOT / "target" / "test-local-fs" / f"pyspark-{pyspark.__version__}-{digest}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:  # pytest's workers start together
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "sluice" / "testing" / "NoForkLocalFs.class").exists():
            jars = Path(pyspark.__file__).parent / "jars" / "*"
            subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(out), "-cp", str(jars),
                            *map(str, sources)], check=True)
    return os.pathsep.join([str(out), str(ROOT / "jvm" / "src" / "test" / "resources")])


BASE_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
    # Spark's maintenance thread is one per JVM and keeps the interval of the first session that
    # started it: the same short interval everywhere keeps snapshot/cleanup tests order-independent.
    "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
    # Spark's JMX metrics sink: tests read the plugin's gauges as a metrics sink reports them.
    "spark.metrics.conf.*.sink.jmx.class": "org.apache.spark.metrics.sink.JmxSink",
}

_current: dict[str, Any] = {"key": None, "spark": None}


def configure_test_jvms() -> None:
    """The test JVM options and class path reach every driver JVM the tests start (sessions here,
    child processes, which inherit the environment, the Spark Connect server); called by conftest's
    pytest_configure, not at import, so that benchmarks importing this module keep the JVM's defaults
    and Hadoop's file system."""
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if TEST_JVM_OPTIONS not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {TEST_JVM_OPTIONS}".strip()
    if TEST_CLASS_PATH_ENV not in os.environ:
        os.environ[TEST_CLASS_PATH_ENV] = no_fork_local_fs()


def sluice_session(master: str = "local[2]", conf: dict[str, str] | None = None,
                   **options: Any) -> SparkSession:
    """A SparkSession with sluice configured; reuses the running one when the settings match."""
    key = (master, tuple(sorted((conf or {}).items())), tuple(sorted(options.items())))
    if _current["key"] == key and _current["spark"] is not None:
        return _current["spark"]
    stop_session()
    builder = fresh_builder().master(master).appName("sluice-tests")
    test_class_path = os.environ.get(TEST_CLASS_PATH_ENV, "")
    # executors of local-cluster masters: Hadoop confs the driver sends them name the file system
    executors = {"spark.executor.extraClassPath": test_class_path} if test_class_path else {}
    for k, v in {**BASE_CONF, **executors, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = sluice.configure(builder, **options).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _current.update(key=key, spark=spark)
    return spark


def fresh_builder() -> SparkSession.Builder:
    """A builder whose settings all reach the new SparkContext: the py4j gateway is launched first
    with only the sluice jar and the test class path (for the driver's class path), since pyspark
    passes the first context's conf to the JVM as system properties that every later context would
    inherit."""
    launch = SparkConf().set("spark.jars", sluice.jar_path())
    if os.environ.get(TEST_CLASS_PATH_ENV):
        launch.set("spark.driver.extraClassPath", os.environ[TEST_CLASS_PATH_ENV])
    SparkContext._ensure_initialized(conf=launch)
    return SparkSession.builder


def parse_settings(pairs: Iterable[str]) -> dict[str, str]:
    """Session settings given as `key=value` strings: a child process's arguments, a soak's --setting."""
    return dict(kv.split("=", 1) for kv in pairs)


def setting_args(settings: dict[str, str]) -> list[str]:
    """`settings` as the `key=value` strings parse_settings reads back."""
    return [f"{k}={v}" for k, v in settings.items()]


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """`settings` in `spark`'s session conf while the block runs; afterwards each key holds what it held
    before (unset if it was not set). Most sluice and Spark settings are read when a query starts, so
    a block around `start()` is enough for the query to keep them."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


@contextlib.contextmanager
def driver_log(logger: str) -> Iterator[Callable[[], list[str]]]:
    """What the driver JVM logs through the log4j logger `logger` while the block runs, read as
    "LEVEL message" lines by the function it yields. The JVM starts first (without a session), so
    the block can start the session whose log it reads; the logger's own appenders are untouched."""
    fresh_builder()
    jvm = SparkContext._jvm
    core = jvm.org.apache.logging.log4j.core
    out = jvm.java.io.StringWriter()
    layout = core.layout.PatternLayout.newBuilder().withPattern("%p %m%n").build()
    # a name of its own: log4j keeps an appender's name in its configuration after removal
    appender = core.appender.WriterAppender.createAppender(layout, None, out, f"sluice-test-{uuid.uuid4()}",
                                                           False, True)
    appender.start()
    target = jvm.org.apache.logging.log4j.LogManager.getLogger(logger)
    target.addAppender(appender)
    try:
        yield lambda: str(out.toString()).splitlines()
    finally:
        target.removeAppender(appender)
        appender.stop()


def stop_session() -> None:
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if _current["spark"] is not None:
        _current["spark"].stop()
    _current.update(key=None, spark=None)

