"""sluice: Kafka Streams' state and emission controls for PySpark Structured Streaming.

Importing this package needs no JVM; ``configure`` only sets builder options.
"""
from __future__ import annotations

from sluice._conf import EXTENSIONS_CLASS, LOADING_SETTINGS, PLUGIN_CLASS  # noqa: F401
from sluice._configure import configure, jar_path
from sluice._errors import (SluiceBufferFullError, SluiceConfError, SluiceError, SluiceSuppressError,
                            SluiceUnsupportedSparkError)
from sluice.suppress import BufferConfig, Suppressed, suppress
from sluice.windowstore import InMemoryWindowStoreSupplier, Stores

__all__ = [
    "configure",
    "jar_path",
    "SluiceError",
    "SluiceConfError",
    "SluiceBufferFullError",
    "SluiceUnsupportedSparkError",
    "Stores",
    "InMemoryWindowStoreSupplier",
    "suppress",
    "Suppressed",
    "BufferConfig",
    "SluiceSuppressError",
]
