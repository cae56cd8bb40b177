"""A real Kafka broker (KRaft, one node acting as broker and controller) on loopback, and Spark's
Kafka connector, both from Maven Central through dev/fetch-kafka. Used by the Kafka tests and by
bench/input; nothing here is mocked."""
from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

import sluice

ROOT = Path(__file__).resolve().parents[2]
KAFKA_HOME = Path(os.environ.get("SLUICE_KAFKA_HOME", Path.home() / ".cache" / "sluice" / "kafka"))

# Kafka's consumer default for fetch.max.wait.ms: how long a broker holds a fetch that finds nothing.
KAFKA_FETCH_MAX_WAIT_MS = 500


def spark_minor() -> str:
    """The minor version of the installed pyspark, whose Kafka connector the tests load."""
    from pyspark.version import __version__

    return ".".join(__version__.split(".")[:2])


def fetch() -> None:
    """Fetches the broker and the running Spark's connector jars unless the cache already has them."""
    subprocess.run([str(ROOT / "dev" / "fetch-kafka"), spark_minor()], check=True)


def connector_jars() -> list[str]:
    fetch()
    return sorted(str(p) for p in (KAFKA_HOME / f"connector-{spark_minor()}").glob("*.jar"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The broker exited because one of its ports was taken."""


class Broker:
    """One KRaft Kafka node in a temporary directory; `bootstrap` is its client address."""

    def __init__(self, workdir: Path, properties: dict[str, str] | None = None) -> None:
        fetch()
        self.workdir = workdir
        self.properties = dict(properties or {})  # server.properties overrides (bench/peers)
        self.port, self.controller_port = _free_port(), _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0, attempts: int = 3) -> "Broker":
        """Starts the node. A port that `_free_port` found free can be taken by another process before
        the node binds it (pytest's workers start Spark and brokers side by side): the node then exits
        saying so, and is started again on new ports, from an empty log directory."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start(timeout)
            except PortTaken:
                if attempt == attempts:
                    raise
                self.port, self.controller_port = _free_port(), _free_port()
                self.bootstrap = f"127.0.0.1:{self.port}"
                shutil.rmtree(self.workdir / "data", ignore_errors=True)
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> "Broker":
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.workdir / 'data'}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "log.flush.interval.messages=1000000",
            *[f"{k}={v}" for k, v in self.properties.items()],
        ]) + "\n")
        log4j = self.workdir / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.workdir / 'broker.log'}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=%d %p %c - %m%n\n")
        java = ["java", "-Xmx512m", f"-Dlog4j.configuration=file:{log4j}",
                "-cp", str(KAFKA_HOME / "broker" / "*")]
        cluster_id = "-"
        while cluster_id.startswith("-"):  # a leading "-" reads as an option to StorageTool (as Kafka's Uuid avoids)
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                       check=True, capture_output=True)
        log = self.workdir / "broker.log"
        log_from = log.stat().st_size if log.exists() else 0
        out = open(self.workdir / "broker.out", "wb")
        self.proc = subprocess.Popen(java + ["kafka.Kafka", str(props)], stdout=out,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                logged = log.read_bytes()[log_from:].decode(errors="replace") if log.exists() else ""
                said = f"{(self.workdir / 'broker.out').read_text()[-3000:]}{logged[-3000:]}"
                raise (PortTaken if "Address already in use" in logged else RuntimeError)(f"Kafka broker exited: {said}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("Kafka broker did not start") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def ensure_driver_jars(jars: list[str]) -> None:
    """The connector must be on the driver's class path, which is fixed when pyspark launches the
    JVM gateway: relaunch it (no session may be running) with the sluice jar and `jars`."""
    gw = SparkContext._gateway
    if gw is not None and getattr(gw, "_sluice_jars", None) == jars:
        return
    if gw is not None:
        gw.shutdown()
        if getattr(gw, "proc", None) is not None:
            gw.proc.stdin.close()
            gw.proc.wait(60)
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkContext._ensure_initialized(
        conf=SparkConf().set("spark.jars", ",".join([sluice.jar_path(), *jars])))
    SparkContext._gateway._sluice_jars = jars  # type: ignore[union-attr]


def create_topic(spark: SparkSession, bootstrap: str, topic: str, partitions: int) -> None:
    create_topic_in(spark._jvm, bootstrap, topic, partitions)


@contextlib.contextmanager
def admin_in(jvm, bootstrap: str) -> Iterator[Any]:
    """An admin client of the JVM `jvm` (a py4j view; the connector on its class path), closed after."""
    props = jvm.java.util.Properties()
    props.setProperty("bootstrap.servers", bootstrap)
    admin = jvm.org.apache.kafka.clients.admin.AdminClient.create(props)
    try:
        yield admin
    finally:
        admin.close()


def create_topic_in(jvm, bootstrap: str, topic: str, partitions: int) -> None:
    """Creates `topic` with the Kafka client of the JVM `jvm`."""
    with admin_in(jvm, bootstrap) as admin:
        new = jvm.org.apache.kafka.clients.admin.NewTopic(topic, partitions, 1)
        admin.createTopics(jvm.java.util.List.of(new)).all().get()


def delete_records(spark: SparkSession, bootstrap: str, topic: str, before: int) -> None:
    """Deletes partition 0's records before offset `before`, as retention would."""
    jvm = spark._jvm
    with admin_in(jvm, bootstrap) as admin:
        tp = jvm.org.apache.kafka.common.TopicPartition(topic, 0)
        # RecordsToDelete.beforeOffset(long) by reflection: py4j does not resolve a static method that
        # shares its name with an instance method (RecordsToDelete.beforeOffset()).
        cls = jvm.java.lang.Class.forName("org.apache.kafka.clients.admin.RecordsToDelete", True,
                                          admin.getClass().getClassLoader())
        method = next(m for m in cls.getMethods() if m.getName() == "beforeOffset" and m.getParameterCount() == 1)
        args = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 1)
        args[0] = jvm.java.lang.Long.valueOf(before)
        admin.deleteRecords(jvm.java.util.Map.of(tp, method.invoke(None, args))).all().get()


def produce(spark: SparkSession, bootstrap: str, topic: str, count: int, partitions: int,
            min_bytes: int = 100, max_bytes: int = 100 * 1024, seed: int = 0,
            first_partition: int = 0, large_every: int = 0, large_bytes: int = 0) -> None:
    """Writes `count` records round-robin over `partitions` partitions (from `first_partition`)
    with keys of 8 bytes and values of deterministic pseudo-random sizes in [min, max); with
    `large_every` = k, every k-th record's value has `large_bytes` instead."""
    span = max_bytes - min_bytes
    size = f"{min_bytes} + cast(pmod(xxhash64(id, {seed}), {max(span, 1)}) as int)"
    if large_every > 0:
        size = f"if(pmod(id, {large_every}) = {large_every - 1}, {large_bytes}, {size})"
    (spark.range(count, numPartitions=2)
     .selectExpr(f"cast(pmod(id, {partitions}) + {first_partition} as int) as partition",
                 "cast(lpad(cast(id as string), 8, '0') as binary) as key",
                 f"cast(repeat('x', {size}) as binary) as value")
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("kafka.max.request.size", str(8 << 20))
     # One request in flight per connection: on a topic just created, the broker can answer the first
     # request NOT_LEADER_OR_FOLLOWER while the idempotent producer's later ones, already sent, get
     # OUT_OF_ORDER_SEQUENCE_NUMBER, which it retries until the delivery timeout fails the write.
     .option("kafka.max.in.flight.requests.per.connection", "1")
     .save())


def kafka_session(conf: dict[str, str] | None = None, **options: Any) -> SparkSession:
    """support.session.sluice_session with Spark's Kafka connector on the driver's class path (the py4j
    gateway is relaunched with it, so no session may be running: the current one is stopped). Imported
    here, not at the top, so that benchmarks using only the broker keep Spark out of its test mode."""
    from support.session import sluice_session, stop_session

    jars = connector_jars()
    stop_session()
    ensure_driver_jars(jars)
    return sluice_session(conf={"spark.jars": ",".join(jars), **(conf or {})}, **options)
