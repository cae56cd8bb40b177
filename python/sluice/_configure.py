"""``configure``: adding sluice to a SparkSession builder (the jar of the running Spark, the plugin,
the extensions and the ``spark.sluice.*`` options)."""
from __future__ import annotations

import os
from typing import Any

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


def configure(builder: SparkSession.Builder, spark_version: str | None = None,
              **options: Any) -> SparkSession.Builder:
    """Adds sluice to a SparkSession builder and sets its ``spark.sluice.*`` options.

    Options are the snake_case forms of the keys, e.g. ``statestore_cache_max_bytes="64m"``,
    ``input_buffer_max_bytes``, ``commit_interval_ms``, and ``state_store`` (``"in_memory_window"``,
    ``"hdfs"`` or ``"rocksdb"``: the state store provider). An unknown option raises ``TypeError``
    and a bad value ``ValueError``, both before any Spark work; so does an option or a key already on
    the builder that sluice removed (``ValueError``, saying when and why). The returned builder's
    ``getOrCreate()`` reports sluice's startup errors as :class:`SluiceError` subclasses.
    It also makes ``query.stop()`` on a foreachBatch query whose batch function is running a job
    end without a StackOverflowError from Spark's stop check (see ``sluice._stop``).

    Spark Connect: with ``builder.remote("local[*]")`` the server pyspark starts gets sluice too
    (with its relation plugin, ``spark.connect.extensions.relation.classes``, which ``suppress``
    needs). A server you start yourself (``sc://`` URLs) needs the same settings at its start;
    on such a builder only the options read per query take effect (``commit_interval_ms``,
    ``input_buffer_max_bytes``, ``statestore_cache_max_bytes``, ``state_store``).

    The jar added is the one built for the running Spark: the installed pyspark's version, or
    ``spark_version`` when given (a Connect client whose server runs another Spark). An unsupported
    Spark raises :class:`SluiceUnsupportedSparkError` here, naming the version found and those supported.
    """
    jar = jar_path(spark_version)
    known = _conf.options()
    current = _handles.builder_options(builder)
    # a removed option or key: when and why it went, not an unknown name (the JVM says the same at start)
    gone = [m for name in sorted(set(options) | set(current)) if (m := _conf.removed_refusal(name)) is not None]
    if gone:
        raise ValueError("; ".join(gone))
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"configure() got unknown option(s) {', '.join(unknown)}; "
                        f"known options: {', '.join(sorted(known))}")
    if options.get("state_store_cache") is True and "state_store" in options:
        raise ValueError("state_store and state_store_cache=True both choose the state store provider; "
                         "to cache a provider, pass statestore_cache_delegate instead of state_store")
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
