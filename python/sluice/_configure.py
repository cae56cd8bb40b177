"""``configure``: adding sluice to a SparkSession builder (the jar of the running Spark, the plugin,
the extensions and the ``spark.sluice.*`` options)."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, ParamSpec, TypeVar

from pyspark.sql import SparkSession

from sluice import _conf, _handles, _spark, _stop
from sluice._errors import translating


def jar_path(spark_version: str | None = None) -> str:
    """Path of the bundled sluice jar for Spark ``spark_version`` (``"4.2"`` or ``"4.2.1"``; default:
    the installed pyspark's). Raises :class:`SluiceUnsupportedSparkError` for a Spark sluice does
    not support."""
    return str(_spark.jar_for(spark_version))


def _append(existing: str | None, value: str) -> str:
    items = [v for v in (existing or "").split(",") if v]
    return ",".join(items if value in items else items + [value])


def _starts_local_connect_server(options: dict[str, Any]) -> bool:
    """Whether ``getOrCreate`` on a builder with these options starts a Spark Connect server in
    this process (``builder.remote("local[*]")``), as pyspark decides it."""
    remote = options.get("spark.remote", os.environ.get("SPARK_REMOTE"))
    mode = str(options.get("spark.api.mode", os.environ.get("SPARK_API_MODE", ""))).lower()
    if remote is None and mode == "connect":
        remote = options.get("spark.master", os.environ.get("MASTER", "local"))
    return remote is not None and not str(remote).startswith("sc://")


ByteSize = int | str
"""A byte size: a number of bytes, or a Spark byte string such as ``"64m"`` or ``"1g"``."""
Duration = int | str | timedelta
"""A duration: milliseconds, a Spark time string such as ``"30s"``, or a ``timedelta``."""
Provider = Literal["hdfs", "rocksdb", "in_memory_window"]
"""A state store provider by sluice's name for it (conf.json's ``providers``)."""


P = ParamSpec("P")
R = TypeVar("R")


def _refusing_removed_options(fn: Callable[P, R]) -> Callable[P, R]:
    """A removed option fails with when and why it went (conf.json's ``removed``), not with Python's
    unexpected-keyword ``TypeError``; the signature, for IDEs and mypy, stays ``fn``'s."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        gone = [m for name in sorted(kwargs) if (m := _conf.removed_refusal(name)) is not None]
        if gone:
            raise ValueError("; ".join(gone))
        return fn(*args, **kwargs)

    return wrapper


@_refusing_removed_options
def configure(
    builder: SparkSession.Builder,
    spark_version: str | None = None,
    *,
    statestore_cache_max_bytes: ByteSize | None = None,
    commit_interval_ms: Duration | None = None,
    input_buffer_max_bytes: ByteSize | None = None,
    input_fetch_max_bytes: ByteSize | None = None,
    state_store: Provider | None = None,
    state_store_cache: bool | None = None,
    statestore_cache_delegate: Provider | None = None,
    json_decoder: Literal["spark", "sluice"] | None = None,
) -> SparkSession.Builder:
    """Adds sluice to a SparkSession builder and sets its ``spark.sluice.*`` options.

    Every option left at ``None`` is not set, so its key keeps its default (or the value another
    setting of the builder gave it). A bad value raises ``ValueError`` naming the key, the value and
    the expected form, before any Spark work; an unknown option is a ``TypeError``, and an option or a
    key already on the builder that sluice removed a ``ValueError`` saying when and why. The returned
    builder's ``getOrCreate()`` reports sluice's startup errors as :class:`SluiceError` subclasses.

    Args:
        builder: the SparkSession builder to add sluice to; returned, so calls chain.
        spark_version: the Spark that runs the queries (``"4.2"`` or ``"4.2.1"``), when it is not
            the installed pyspark's (a Spark Connect client whose server runs another Spark). An
            unsupported Spark raises :class:`SluiceUnsupportedSparkError`.
        statestore_cache_max_bytes: ``spark.sluice.statestore.cache.max.bytes``, the record cache's
            bytes per executor, split evenly over its task slots (KIP-63).
        commit_interval_ms: ``spark.sluice.commit.interval.ms``, how often cached state and held
            emissions are flushed; ``0`` flushes every micro-batch.
        input_buffer_max_bytes: ``spark.sluice.input.buffer.max.bytes``, the input bytes a query
            admits per micro-batch (KIP-770).
        input_fetch_max_bytes: ``spark.sluice.input.fetch.max.bytes``, the bytes one poll of a Kafka
            partition may fetch where the source does not set it; ``0`` keeps Kafka's defaults.
        state_store: the state store provider (``spark.sql.streaming.stateStore.providerClass``):
            ``"in_memory_window"`` is sluice's window store (KIP-428), ``"hdfs"`` and ``"rocksdb"``
            Spark's own.
        state_store_cache: ``True`` puts the record cache in front of the state store
            (``sluice.cache.CachingStateStoreProvider``); cannot be combined with ``state_store``.
        statestore_cache_delegate: ``spark.sluice.statestore.cache.delegate``, the provider the
            record cache wraps (default ``"rocksdb"``).
        json_decoder: experimental; ``"sluice"`` decodes ``from_json`` from the record's bytes where
            it can (``spark.sluice.json.decoder``).

    Spark Connect: with ``builder.remote("local[*]")`` the server pyspark starts gets sluice too
    (with its relation plugin, ``spark.connect.extensions.relation.classes``, which ``suppress``
    needs). A server you start yourself (``sc://`` URLs) needs the same settings at its start;
    on such a builder only the options read per query take effect (``commit_interval_ms``,
    ``input_buffer_max_bytes``, ``statestore_cache_max_bytes``, ``state_store``).

    It also makes ``query.stop()`` on a foreachBatch query whose batch function is running a job
    end without a StackOverflowError from Spark's stop check (Spark matches that error's text with
    a regex that overflows the query thread's stack on py4j's long messages).
    """
    # The keyword-only parameters are the options; locals() holds exactly the parameters here.
    options = {name: value for name, value in locals().items() if name in OPTION_NAMES and value is not None}
    jar = jar_path(spark_version)
    known = _conf.options()
    current = _handles.builder_options(builder)
    # a removed key already on the builder: when and why it went (the JVM says the same at start)
    gone = [m for name in sorted(current) if (m := _conf.removed_refusal(name)) is not None]
    if gone:
        raise ValueError("; ".join(gone))
    if options.get("state_store_cache") is True and "state_store" in options:
        raise ValueError(
            "state_store and state_store_cache=True both choose the state store provider; "
            "to cache a provider, pass statestore_cache_delegate instead of state_store"
        )
    settings = {known[name].key: known[name].to_conf(value) for name, value in options.items()}
    settings = {k: v for k, v in settings.items() if v is not None}  # a False flag sets nothing

    _stop.install()
    builder.config("spark.jars", _append(current.get("spark.jars"), jar))
    for key, cls in _conf.loading_settings().items():
        builder.config(key, _append(current.get(key), cls))
    if _starts_local_connect_server(current):
        # pyspark starts that server with spark.plugins replaced by Connect's own plugin; Spark
        # loads the plugins of spark.plugins.defaultList as well.
        plugin = _conf.contract()["classes"]["plugin"]
        builder.config("spark.plugins.defaultList", _append(current.get("spark.plugins.defaultList"), plugin))
    for key, value in settings.items():
        builder.config(key, value)
    if not getattr(builder, "_sluice_translating", False):
        builder.getOrCreate = translating(builder.getOrCreate)  # type: ignore[method-assign]
        builder._sluice_translating = True  # type: ignore[attr-defined]
    return builder


OPTION_NAMES: tuple[str, ...] = tuple(
    name for name, p in inspect.signature(configure).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
)
"""``configure()``'s options; ``tests/product/test_plugin.py`` checks they are conf.json's, one for one."""
