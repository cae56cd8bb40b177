"""A clean stop for foreachBatch queries whose batch function is running a Spark job.

`query.stop()` interrupts the query thread; a job the batch function is waiting on then fails in
Python with a Py4JJavaError about java.lang.InterruptedException, which py4j hands back to the JVM
as text: the Python traceback, which embeds the Java stack trace (~8 KB). Spark 4.1 recognises a
stop from that text with the regex ``StreamExecution.PROXY_ERROR``, whose
``((.|\\r\\n|\\r|\\n)*)`` recurses once per character: on text this long the query thread dies with a
StackOverflowError and prints ~1,000 lines of regex frames (with any state store provider, and
without sluice). Here such an error reaches the JVM as the same first line without the stack
trace, which the regex still recognises as a stop, at a depth it can take.
"""
from __future__ import annotations

from typing import Any

from py4j.protocol import Py4JJavaError

# The exception names Spark's check looks for after "An error occurred while calling".
_INTERRUPTIONS = frozenset({
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
})


class _InterruptedCall(Py4JJavaError):
    """Prints as py4j's Py4JJavaError does, without the Java stack trace."""

    def __init__(self, original: Py4JJavaError, interruption: str) -> None:
        super().__init__(original.errmsg, original.java_exception)
        self._text = f"{original.errmsg}: {interruption}"

    def __str__(self) -> str:
        return self._text


# traceback.format_exc names the class by module and qualified name: keep py4j's, as Spark matches it.
_InterruptedCall.__module__ = "py4j.protocol"
_InterruptedCall.__qualname__ = "Py4JJavaError"


def _interruption(error: Py4JJavaError) -> str | None:
    """The interruption exception's class name if one is in the Java cause chain (first 20 links)."""
    try:
        cause = error.java_exception
        for _ in range(20):
            if cause is None:
                return None
            name = str(cause.getClass().getName())
            if name in _INTERRUPTIONS:
                return name
            cause = cause.getCause()
    except Exception:  # the JVM side may be going away: leave the error as it is
        return None
    return None


def install() -> None:
    """Wraps pyspark's foreachBatch callback (once per process) so an interrupted call is raised short."""
    from pyspark.sql.utils import ForeachBatchFunction

    original = ForeachBatchFunction.call
    if getattr(original, "_sluice_short_interrupts", False):
        return

    def call(self: Any, jdf: Any, batch_id: int) -> None:
        try:
            original(self, jdf, batch_id)
        except Py4JJavaError as e:
            name = _interruption(e)
            if name is None:
                raise
            raise _InterruptedCall(e, name) from None

    call._sluice_short_interrupts = True  # type: ignore[attr-defined]
    ForeachBatchFunction.call = call  # type: ignore[method-assign]
