"""sluice: Kafka Streams' state and emission controls for PySpark Structured Streaming.

Importing this package needs no JVM; ``configure`` only sets builder options.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from sluice._conf import OPTIONS
from sluice._jvm import SluiceBufferFullError, SluiceConfError, SluiceError, translating
from sluice.stores import InMemoryWindowStoreSupplier, Stores
from sluice.suppress import BufferConfig, SluiceSuppressError, Suppressed, suppress

__all__ = [
    "configure",
    "jar_path",
    "SluiceError",
    "SluiceConfError",
    "SluiceBufferFullError",
    "Stores",
    "InMemoryWindowStoreSupplier",
    "suppress",
    "Suppressed",
    "BufferConfig",
    "SluiceSuppressError",
]

PLUGIN_CLASS = "sluice.plugin.SluicePlugin"
EXTENSIONS_CLASS = "sluice.plugin.SluiceExtensions"


def jar_path() -> str:
    """Path of the sluice jar bundled in this package."""
    jar = Path(__file__).resolve().parent / "jars" / "sluice.jar"
    if not jar.is_file():
        raise FileNotFoundError(
            f"{jar} is missing: install sluice with pip (it builds the jar) or run dev/build-jar")
    return str(jar)


def _append(existing: str | None, value: str) -> str:
    items = [v for v in (existing or "").split(",") if v]
    return ",".join(items if value in items else items + [value])


def configure(builder: SparkSession.Builder, **options: Any) -> SparkSession.Builder:
    """Adds sluice to a SparkSession builder and sets its ``spark.sluice.*`` options.

    Options are the snake_case forms of the keys, e.g. ``statestore_cache_max_bytes="64m"``,
    ``input_buffer_max_bytes``, ``commit_interval_ms``, and ``state_store`` (``"in_memory_window"``,
    ``"hdfs"`` or ``"rocksdb"``: the state store provider). An unknown option raises ``TypeError``
    and a bad value ``ValueError``, both before any Spark work. The returned builder's
    ``getOrCreate()`` reports sluice's startup errors as :class:`SluiceError` subclasses.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"configure() got unknown option(s) {', '.join(unknown)}; "
                        f"known options: {', '.join(sorted(OPTIONS))}")
    if options.get("state_store_cache") is True and "state_store" in options:
        raise ValueError("state_store and state_store_cache=True both choose the state store provider; "
                         "to cache a provider, pass statestore_cache_delegate instead of state_store")
    settings = {OPTIONS[name].key: OPTIONS[name].to_conf(value) for name, value in options.items()}
    settings = {k: v for k, v in settings.items() if v is not None}  # a False flag sets nothing

    current = getattr(builder, "_options", {})
    builder.config("spark.jars", _append(current.get("spark.jars"), jar_path()))
    builder.config("spark.plugins", _append(current.get("spark.plugins"), PLUGIN_CLASS))
    builder.config("spark.sql.extensions", _append(current.get("spark.sql.extensions"), EXTENSIONS_CLASS))
    for key, value in settings.items():
        builder.config(key, value)
    if not getattr(builder, "_sluice_translating", False):
        builder.getOrCreate = translating(builder.getOrCreate)  # type: ignore[method-assign]
        builder._sluice_translating = True  # type: ignore[attr-defined]
    return builder
