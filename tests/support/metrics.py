"""The executor side as a metrics sink sees it: MBeans of this JVM (Spark's JMX sink, the Kafka
client's own metrics) and the slot budget each executor's tasks see. Local mode: the executor shares
the driver's JVM and metrics system."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

_BUDGET = re.compile(r"^SlotBudget\((.*),(\d+),(\d+),(\d+),(\d+)\)$")


PLUGIN_SOURCE = "plugin.sluice.plugin.SluicePlugin"


def jmx_attribute(gateway: Any, pattern: str, attribute: str,
                  keep: Callable[[Any], bool] = lambda _: True) -> dict[Any, Any]:
    """{ObjectName: value of `attribute`} for the MBeans of this JVM matching `pattern` whose name
    `keep` takes. An MBean unregistered between the query and the read (a Kafka consumer of another
    query, closed by Spark's consumer pool meanwhile) is left out. The MBean server is called through
    its public interface: py4j looks methods up on the JDK's non-exported implementation class, where
    it finds none."""
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
    out = {}
    for name in list(names):
        if not keep(name):
            continue
        try:
            out[name] = call(server, "getAttribute", ["javax.management.ObjectName", "java.lang.String"],
                             [name, attribute])
        except Py4JJavaError as e:
            if "InstanceNotFoundException" not in e.java_exception.getClass().getName() + str(e):
                raise
    return out


def executor_consumer_metrics(spark: Any, group_prefix: str, metric: str) -> list[float]:
    """The Kafka client's `metric` (consumer-fetch-manager-metrics: fetch-size-max in bytes,
    fetch-latency-max in ms, fetch-total) of each executor consumer of the query started with
    `groupIdPrefix` = `group_prefix`, from the client's own JMX metrics (local mode: the executor is
    this JVM). Fails when the query has no executor consumer."""
    def ours(name: Any) -> bool:
        client = str(name.getKeyProperty("client-id"))
        return client.startswith(f"consumer-{group_prefix}-") and "-executor-" in client

    clients = jmx_attribute(spark.sparkContext._gateway,
                            "kafka.consumer:type=consumer-fetch-manager-metrics,client-id=*", metric, ours)
    values = [float(v) for v in clients.values()]
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

