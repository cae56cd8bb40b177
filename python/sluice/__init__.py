"""sluice: Kafka Streams' state and emission controls for PySpark Structured Streaming.

Importing this package needs no JVM; ``configure`` only sets builder options.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import Any

from sluice import _conf
from sluice._configure import configure, jar_path
from sluice._errors import (
    SluiceBufferFullError,
    SluiceConfError,
    SluiceError,
    SluiceSuppressError,
    SluiceUnsupportedSparkError,
)
from sluice.suppress import BufferConfig, Suppressed, late_records, suppress
from sluice.windowstore import InMemoryWindowStoreSupplier, Stores

__all__ = [
    "__version__",
    "configure",
    "jar_path",
    "SluiceError",
    "SluiceConfError",
    "SluiceBufferFullError",
    "SluiceUnsupportedSparkError",
    "Stores",
    "InMemoryWindowStoreSupplier",
    "suppress",
    "late_records",
    "Suppressed",
    "BufferConfig",
    "SluiceSuppressError",
]


try:
    __version__ = _metadata.version("spark-sluice")
    """The installed distribution's version (the repository's VERSION file)."""
except _metadata.PackageNotFoundError:  # sources on the path, not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    # The class names that load sluice, read from the bundled conf.json on first use, not at import.
    if name in ("EXTENSIONS_CLASS", "LOADING_SETTINGS", "PLUGIN_CLASS"):
        return getattr(_conf, name)
    raise AttributeError(name)
