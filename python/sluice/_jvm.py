"""py4j plumbing: reaching sluice's Scala side and turning its errors into Python exceptions."""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, TypeVar

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


# Java exception classes (or their causes) that map to specific Python exceptions.
_TRANSLATIONS: dict[str, type[SluiceError]] = {
    "sluice.conf.SluiceConfException": SluiceConfError,
    "sluice.suppress.BufferFullException": SluiceBufferFullError,
    "sluice.suppress.SuppressUsageException": SluiceSuppressError,
}


def translation_for(java_class: str) -> type[SluiceError]:
    """The Python exception class for a sluice Java exception class."""
    return _TRANSLATIONS.get(java_class, SluiceError)


def _java_causes(java_exc: Any) -> Iterator[Any]:
    seen = 0
    while java_exc is not None and seen < 20:
        yield java_exc
        java_exc = java_exc.getCause()
        seen += 1


def translate(exc: BaseException) -> BaseException:
    """Returns a readable Python exception for a py4j/pyspark error carrying a sluice exception."""
    java_exc = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java_exc is None:
        return exc
    try:
        for cause in _java_causes(java_exc):
            name = cause.getClass().getName()
            if name.startswith("sluice."):
                return translation_for(name)(str(cause.getMessage()), name)
    except Exception:  # the JVM may be gone; keep the original error
        return exc
    return exc


def translating(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: calls ``fn`` and re-raises sluice JVM errors as Python exceptions."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            translated = translate(e)
            if translated is e:
                raise
            raise translated from None

    return wrapper


def jvm(spark: Any) -> Any:
    """The py4j view of the session's JVM."""
    from sluice._connect import is_connect_session

    if is_connect_session(spark):
        raise SluiceError(
            "this needs a classic SparkSession: a Spark Connect client has no JVM to call (sluice's "
            "conf keys, suppress and the query metrics work over Connect)")
    return spark.sparkContext._jvm
