"""sluice's Python exceptions, and the one translation of a JVM-side sluice error into them.

A sluice error raised in the JVM reaches Python two ways: through py4j (a classic session: the
Java exception object, whose cause chain names the sluice class) or from a Spark Connect server
(text: pyspark shows an exception it has no Python class for as ``(<Java class>) <message>``).
``translate`` reads both; ``translating`` applies it as a decorator or a context manager.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal, TypeVar

T = TypeVar("T")


class SluiceError(Exception):
    """An error raised by sluice's JVM side, with the Java exception's one-line message."""

    def __init__(self, message: str, java_class: str | None = None) -> None:
        super().__init__(message)
        self.java_class = java_class


class SluiceConfError(SluiceError, ValueError):
    """A bad ``spark.sluice.*`` setting: the message names the key, the value and the expected form."""


class SluiceBufferFullError(SluiceError):
    """A suppress buffer configured with ``shut_down_when_full()`` exceeded its bound."""


class SluiceSuppressError(SluiceError, ValueError):
    """``suppress`` used on a DataFrame it cannot work on; the message says what to do."""


class SluiceUnsupportedSparkError(SluiceError, RuntimeError):
    """The running Spark is not one sluice supports (or its jar is not bundled)."""


# Java exception classes (or their causes) that map to specific Python exceptions.
_TRANSLATIONS: dict[str, type[SluiceError]] = {
    "sluice.conf.SluiceConfException": SluiceConfError,
    "sluice.suppress.BufferFullException": SluiceBufferFullError,
    "sluice.suppress.SuppressUsageException": SluiceSuppressError,
}

# What a Connect server says when sluice's relation plugin is not loaded, and the error for it
# (set by sluice._connect, which knows the settings to name).
MISSING_CONNECT_PLUGIN = "No handler found for extension"
_missing_connect_plugin: list[Callable[[], SluiceError]] = []

# pyspark shows a server exception it has no Python class for as "(<Java class>) <message>".
_UNKNOWN_SERVER_ERROR = re.compile(r"^\((sluice\.[\w.$]+)\) (.*)$", re.DOTALL)


def translation_for(java_class: str) -> type[SluiceError]:
    """The Python exception class for a sluice Java exception class."""
    return _TRANSLATIONS.get(java_class, SluiceError)


def on_missing_connect_plugin(make: Callable[[], SluiceError]) -> None:
    """Sets the error raised when a Connect server lacks sluice's relation plugin."""
    _missing_connect_plugin[:] = [make]


def _java_causes(java_exc: Any) -> Iterator[Any]:
    seen = 0
    while java_exc is not None and seen < 20:
        yield java_exc
        java_exc = java_exc.getCause()
        seen += 1


def _from_py4j(exc: BaseException, java_exc: Any) -> BaseException:
    try:
        for cause in _java_causes(java_exc):
            name = cause.getClass().getName()
            if name.startswith("sluice."):
                return translation_for(name)(str(cause.getMessage()), name)
    except Exception:  # the JVM may be gone; keep the original error
        return exc
    return exc


def _from_connect(exc: BaseException) -> BaseException:
    getter = getattr(exc, "getMessage", None)
    message = getter() if callable(getter) else str(exc)
    if MISSING_CONNECT_PLUGIN in message and _missing_connect_plugin:
        return _missing_connect_plugin[0]()
    m = _UNKNOWN_SERVER_ERROR.match(message)
    if m is None:
        return exc
    java_class, text = m.group(1), m.group(2).split("\n\nJVM stacktrace:", 1)[0]
    return translation_for(java_class)(text, java_class)


def translate(exc: BaseException) -> BaseException:
    """A readable sluice exception for a py4j or Spark Connect error raised by sluice in the JVM;
    else ``exc`` itself."""
    java_exc = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    return _from_py4j(exc, java_exc) if java_exc is not None else _from_connect(exc)


class _Translating:
    """Re-raises sluice JVM errors raised in the block as sluice exceptions."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: TracebackType | None) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception):
            return False
        translated = translate(exc)
        if translated is exc:
            return False
        raise translated from None


def translating(fn: Callable[..., T] | None = None) -> Any:
    """``@translating`` on a function, or ``with translating():`` around a block: sluice JVM
    errors raised there are re-raised as sluice exceptions, others pass unchanged."""
    if fn is None:
        return _Translating()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with _Translating():
            return fn(*args, **kwargs)

    return wrapper
