"""Shared SparkSession handling: one local[2] session reused across modules while its settings
match, so the suite pays JVM startup only when a test needs different SparkConf."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pytest
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

import sluice

# Spark's test mode: Spark checks its own contracts (e.g. that analyzer rules never call a plain
# transform) only when it is on, so every session and child process here runs with it, as
# Spark's own suites and many users' test setups do.
os.environ["SPARK_TESTING"] = "1"

ROOT = Path(__file__).resolve().parents[1]

# dev/test-jvm-options: the options of the JVMs tests start (why: that file).
TEST_JVM_OPTIONS = " ".join(line for line in (ROOT / "dev" / "test-jvm-options")
                            .read_text().splitlines() if line.strip() and not line.startswith("#"))

TEST_CLASS_PATH_ENV = "SLUICE_TEST_CLASS_PATH"


def _no_fork_local_fs() -> str:
    """The class path of the test JVMs' local file system (jvm/src/test/java/sluice/testing, the
    classes compiled here against this pyspark, and core-site.xml, which makes them the `file` scheme):
    Hadoop without its native library forks chmod and readlink for every checkpoint file. Empty
    (Hadoop's own, slower) where no javac is found. pytest_configure passes it to the sessions and
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


def pytest_configure(config: pytest.Config) -> None:
    """The test JVM options and class path reach every driver JVM the tests start (sessions here,
    child processes, which inherit the environment, the Spark Connect server); set here, not at
    import, so that benchmarks importing this module keep the JVM's defaults and Hadoop's file system."""
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if TEST_JVM_OPTIONS not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {TEST_JVM_OPTIONS}".strip()
    if TEST_CLASS_PATH_ENV not in os.environ:
        os.environ[TEST_CLASS_PATH_ENV] = _no_fork_local_fs()


# The files that take minutes, longest first (summed test times, 2026-11-26; test_spark_upgrade.py's,
# in 4.2's cross-version half, 2026-12-06), run before the rest: pytest-xdist hands whole files to its
# workers in collection order, and a long file handed out last keeps one worker busy while the other
# has nothing left to take.
LONG_FILES = ("test_sessions.py", "test_composition.py", "test_suppress.py", "test_crash_soak.py",
              "test_install.py", "test_spark_upgrade.py", "test_cache_writebehind.py", "test_multi_executor.py",
              "test_realtime.py", "test_connect.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: a file keeps its order


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


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield sluice_session()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Kafka broker (kafka_harness.Broker) for the module's tests."""
    import kafka_harness as kh

    b = kh.Broker(tmp_path_factory.mktemp("kafka")).start()
    yield b
    b.stop()


def kafka_session(conf: dict[str, str] | None = None, **options: Any) -> SparkSession:
    """sluice_session with Spark's Kafka connector on the driver's class path (the py4j gateway is
    relaunched with it, so no session may be running: the current one is stopped)."""
    import kafka_harness as kh

    jars = kh.connector_jars()
    stop_session()
    kh.ensure_driver_jars(jars)
    return sluice_session(conf={"spark.jars": ",".join(jars), **(conf or {})}, **options)


@pytest.fixture(params=["hdfs", "rocksdb"])
def provider(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[str]:
    """Runs a test once per built-in state store provider (set per query, recorded in the checkpoint)."""
    classes = {
        "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    }
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", classes[request.param])
    yield request.param
    spark.conf.unset("spark.sql.streaming.stateStore.providerClass")


_BUDGET = re.compile(r"^SlotBudget\((.*),(\d+),(\d+),(\d+),(\d+)\)$")


PLUGIN_SOURCE = "plugin.sluice.plugin.SluicePlugin"


def jmx_attribute(gateway: Any, pattern: str, attribute: str) -> dict[Any, Any]:
    """{ObjectName: value of `attribute`} for the MBeans of this JVM matching `pattern`. The MBean
    server is called through its public interface: py4j looks methods up on the JDK's non-exported
    implementation class, where it finds none."""
    jvm = gateway.jvm
    Class = jvm.java.lang.Class
    iface = Class.forName("javax.management.MBeanServer")

    def call(target: Any, method: str, types: list[str], args: list[Any]) -> Any:
        params = gateway.new_array(jvm.java.lang.Class, len(types))
        values = gateway.new_array(jvm.java.lang.Object, len(args))
        for i, (t, a) in enumerate(zip(types, args)):
            params[i] = Class.forName(t)
            values[i] = a
        return iface.getMethod(method, params).invoke(target, values)

    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    names = call(server, "queryNames", ["javax.management.ObjectName", "javax.management.QueryExp"],
                 [jvm.javax.management.ObjectName(pattern), None])
    return {name: call(server, "getAttribute", ["javax.management.ObjectName", "java.lang.String"],
                       [name, attribute]) for name in list(names)}


# Kafka's consumer default for fetch.max.wait.ms: how long a broker holds a fetch that finds nothing.
KAFKA_FETCH_MAX_WAIT_MS = 500


def executor_consumer_metrics(spark: Any, group_prefix: str, metric: str) -> list[float]:
    """The Kafka client's `metric` (consumer-fetch-manager-metrics: fetch-size-max in bytes,
    fetch-latency-max in ms, fetch-total) of each executor consumer of the query started with
    `groupIdPrefix` = `group_prefix`, from the client's own JMX metrics (local mode: the executor is
    this JVM). Fails when the query has no executor consumer."""
    clients = jmx_attribute(spark.sparkContext._gateway,
                            "kafka.consumer:type=consumer-fetch-manager-metrics,client-id=*", metric)
    values = [float(v) for name, v in clients.items()
              if str(name.getKeyProperty("client-id")).startswith(f"consumer-{group_prefix}-")
              and "-executor-" in str(name.getKeyProperty("client-id"))]
    assert values, f"no executor consumer of the group prefix {group_prefix}"
    return values


def jmx_gauges(gateway: Any, source: str) -> dict[str, dict[str, int]]:
    """The gauges of metrics source `source` as Spark's JMX sink publishes them in this JVM, by
    the prefix of their registry name (``<app>.<executor>.``, or empty where Spark registered the
    source before the application had an id, as for executor plugins in local mode):
    {prefix: {gauge: value}}. (JMX rather than Spark's metrics system through py4j. spark-4.3:
    py4j cannot reflect on SparkEnv, one of whose methods names a class pyspark does not ship.)"""
    marker = f"{source}."
    found: dict[str, dict[str, int]] = {}
    for name, value in jmx_attribute(gateway, "metrics:type=gauges,*", "Value").items():
        full = "." + str(name.getKeyProperty("name")).strip('"')
        if f".{marker}" in full:
            prefix, gauge = full[1:].split(marker, 1)
            found.setdefault(prefix, {})[gauge] = int(value)
    return found


def plugin_gauges(spark: SparkSession) -> dict[str, int]:
    """The sluice executor plugin's gauges as a metrics sink reports them (Spark's JMX sink, in
    BASE_CONF). Local mode: the executor shares the driver's JVM and metrics system."""
    by_prefix = jmx_gauges(spark.sparkContext._gateway, PLUGIN_SOURCE)
    assert len(by_prefix) == 1, f"expected the gauges of one executor plugin in JMX, found {sorted(by_prefix)}"
    return next(iter(by_prefix.values()))


def executor_budgets(spark: SparkSession, executors: int = 1, attempts: int = 20) -> dict[str, dict[str, int]]:
    """Each executor's slot budget as its tasks see it (``sluice.conf.MemoryBudget.current``, read
    by ``java_method`` in tasks on the executors), by executor id. Runs one small job per attempt
    until tasks have reported from ``executors`` executors (which executor runs a task is the
    scheduler's choice)."""
    found: dict[str, dict[str, int]] = {}
    n = max(8, 4 * spark.sparkContext.defaultParallelism)
    for _ in range(attempts):
        rows = spark.range(0, n, 1, n).selectExpr(
            "java_method('sluice.conf.MemoryBudget', 'current') AS b").distinct().collect()
        for r in rows:
            m = _BUDGET.match(r.b)
            assert m, r.b
            found[m.group(1)] = {"task_slots": int(m.group(2)), "cache_max_bytes": int(m.group(3)),
                                 "cache_bytes_per_slot": int(m.group(4)),
                                 "input_buffer_max_bytes": int(m.group(5))}
        if len(found) >= executors:
            break
    return found


def count_sum_by_key(batches: list[list[dict[str, Any]]]) -> dict[str, tuple[int, int]]:
    """What `groupBy(k).agg(count, sum(v))` yields over all `batches` of {"k", "v"} rows."""
    out: dict[str, tuple[int, int]] = {}
    for b in batches:
        for r in b:
            n, s = out.get(r["k"], (0, 0))
            out[r["k"]] = (n + 1, s + r["v"])
    return out


def batch_file_sink(out: str, to_json: Callable[[Any], Any]) -> Callable[[Any, int], None]:
    """A foreachBatch sink idempotent per batch id: each batch's rows, mapped by `to_json`, go to
    <out>/<batch id>.json, replaced atomically, so a replayed batch overwrites its own file."""
    def sink(batch: Any, batch_id: int) -> None:
        tmp = os.path.join(out, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump([to_json(r) for r in batch.collect()], f)
        os.replace(tmp, os.path.join(out, f"{batch_id:05d}.json"))
    return sink


def drain_to_files(spark: SparkSession, df: Any, sink: Callable[[Any, int], None], checkpoint: Path,
                   conf: dict[str, str]) -> None:
    """Restarts an update-mode query on `checkpoint` in this process with the session `conf` set
    (unset afterwards), writing through `sink` until all input is processed."""
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        q = (df.writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).start())
        q.processAllAvailable()
        q.stop()
    finally:
        for k in conf:
            spark.conf.unset(k)


def kill_after_batches(script: str, args: list[str], out: Path, batches: int, timeout: float = 180.0) -> None:
    """Runs tests/<script> (a query writing through `batch_file_sink` into `out`) in its own process
    group and SIGKILLs the whole group, driver JVM included, once `batches` batch files exist."""
    kill_when(script, args, lambda: len(list(out.glob("*.json"))) >= batches, timeout)


def kill_when(script: str, args: list[str], ready: Callable[[], bool], timeout: float = 180.0) -> None:
    """Runs tests/<script> in its own process group and SIGKILLs the whole group, driver JVM
    included, once `ready()` holds."""
    child = subprocess.Popen([sys.executable, str(Path(__file__).parent / script), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert child.poll() is None, "child query died"
            assert time.monotonic() < deadline, "child query made no progress"
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


HOURLY_USERS = ["a", "b", "c", "a"]


def _hourly_users(h: int) -> list[str]:
    return HOURLY_USERS[: 2 + h % 3]


def write_hourly_files(src: Path, hours: int | range, ts: Callable[[float], str]) -> None:
    """Input of the suppress kill tests, one file per micro-batch: file h holds 2 to 4 events
    (users a, b, c, a) in hour h, so it closes hour h - 1; `ts` formats seconds after the module's T0.
    The files are dated in order, as the file source takes them. `hours`: a count from hour 0, or a
    range of hours (to add files to a stream that has read the earlier ones)."""
    for h in (range(hours) if isinstance(hours, int) else hours):
        with open(src / f"{h:03d}.json", "w") as f:
            for i, user in enumerate(_hourly_users(h)):
                f.write(json.dumps({"ts": ts(h * 3600 + 900 + i * 60), "user": user, "v": 1}) + "\n")
        os.utime(src / f"{h:03d}.json", (1_700_000_000 + h, 1_700_000_000 + h))


def hourly_finals(hours: int, hour_start: Callable[[int], str]) -> Counter:
    """The final results of `hours` hourly files (write_hourly_files) under suppress_kill_child's query,
    each once, as (hour start as `hour_start(h)` gives it, user, count): every hour but the last,
    which stays open."""
    expected: Counter = Counter()
    for h in range(hours - 1):
        users = _hourly_users(h)
        for user in set(users):
            expected[(hour_start(h), user, users.count(user))] = 1
    return expected


def emitted_finals(out: Path) -> Counter:
    """The (start, user, count) rows in `out`'s batch files (suppress_kill_child.file_sink), counted."""
    got: Counter = Counter()
    for path in sorted(out.glob("*.json")):
        for r in json.load(open(path)):
            got[(r["start"], r["user"], r["count"])] += 1
    return got


def hadoop_checksums(ckpt: Path) -> list[str]:
    """Hadoop's checksum files (`.<name>.crc`) under `ckpt`: Spark's own checkpoint file manager writes
    one beside every file on the checksummed local file system the tests run on, sluice's
    (`checkpoint_local_direct`) none. RocksDB's SST files are left out: Spark's RocksDB provider copies
    them with Hadoop's FileSystem API, not through the manager. (Spark 4.1's HDFS-backed provider also
    writes checksums of its own, `<name>.crc`, through the manager: those are files like any other.)"""
    return sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob(".*.crc") if "SSTs" not in p.parts)


class FileFedQuery:
    """A streaming query fed one JSON file per micro-batch from `root`/in; its progress is kept
    across restarts. Subclasses start `self.query`."""

    def __init__(self, spark: SparkSession, root: Path):
        self.spark, self.root = spark, root
        self.inputs = root / "in"
        self.inputs.mkdir(parents=True, exist_ok=True)
        self.n = 0
        self.progress: list[dict] = []
        self.query: Any = None

    def feed(self, rows: list[dict[str, Any]], wait: bool = True) -> None:
        (self.inputs / f"part-{self.n:05d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        self.n += 1
        if wait:
            self.query.processAllAvailable()

    def stop(self) -> None:
        self.progress += [json.loads(p.json) for p in self.query.recentProgress]
        self.query.stop()
