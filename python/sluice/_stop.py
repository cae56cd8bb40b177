"""A clean stop for foreachBatch queries whose batch function is running a Spark job.

`query.stop()` interrupts the query thread; a job the batch function is waiting on then fails in
Python with a Py4JJavaError about java.lang.InterruptedException, which py4j hands back to the JVM
as text: the Python traceback, which embeds the Java stack trace (~8 KB). spark-4.1 to spark-4.3: Spark
recognises a stop from that text with the regex ``StreamExecution.PROXY_ERROR``, whose
``((.|\\r\\n|\\r|\\n)*)`` recurses once per character: on text this long the query thread dies with a
StackOverflowError and prints ~1,000 lines of regex frames (with any state store provider, and
without sluice). The stop can also reach the batch function as the cancellation of its job (a
SparkException naming the query's run id, which Spark recognises by text after the regex): which
of the two comes first is a race. Here either error reaches the JVM as py4j's first line and the
Java exception's first line, without the stack trace: Spark still recognises it as a stop, at a
depth the regex can take. Any other error is left as it is.
"""

from __future__ import annotations

from typing import Any

from py4j.protocol import Py4JJavaError

# The exception names Spark's check looks for after "An error occurred while calling".
_INTERRUPTIONS = frozenset(
    {
        "java.lang.InterruptedException",
        "java.io.InterruptedIOException",
        "java.nio.channels.ClosedByInterruptException",
    }
)


class _StopCall(Py4JJavaError):  # type: ignore[misc]  # py4j is untyped
    """Prints as py4j's Py4JJavaError does, without the Java stack trace."""

    def __init__(self, original: Py4JJavaError, cause: str) -> None:
        super().__init__(original.errmsg, original.java_exception)
        self._text = f"{original.errmsg}: {cause}"

    def __str__(self) -> str:
        return self._text


# traceback.format_exc names the class by module and qualified name: keep py4j's, as Spark matches it.
_StopCall.__module__ = "py4j.protocol"
_StopCall.__qualname__ = "Py4JJavaError"


def _job_group(jdf: Any) -> str | None:
    """The job group of the thread running the batch: the query's run id, which a stop cancels."""
    try:
        group = jdf.sparkSession().sparkContext().getLocalProperty("spark.jobGroup.id")
    except Exception:
        return None
    return None if group is None else str(group)


def _stop_cause(error: Py4JJavaError, job_group: str | None) -> str | None:
    """The first line of the link in the Java cause chain (first 20 links) that tells of a stop,
    as Spark's check reads it: an interruption, or a SparkException saying the batch's job group
    was cancelled; None if there is none."""
    try:
        cause = error.java_exception
        for _ in range(20):
            if cause is None:
                return None
            name = str(cause.getClass().getName())
            if name in _INTERRUPTIONS:
                return name
            message = cause.getMessage()
            if (
                name == "org.apache.spark.SparkException"
                and job_group
                and message is not None
                and "cancelled" in str(message)
                and job_group in str(message)
            ):
                return f"{name}: {str(message).splitlines()[0]}"
            cause = cause.getCause()
    except Exception:  # the JVM side may be going away: leave the error as it is
        return None
    return None


def install() -> None:
    """Wraps pyspark's foreachBatch callback (once per process) so a call ended by a stop is raised short."""
    from pyspark.sql.utils import ForeachBatchFunction

    original = ForeachBatchFunction.call
    if getattr(original, "_sluice_short_interrupts", False):
        return

    def call(self: Any, jdf: Any, batch_id: int) -> None:
        job_group = _job_group(jdf)
        try:
            original(self, jdf, batch_id)
        except Py4JJavaError as e:
            cause = _stop_cause(e, job_group)
            if cause is None:
                raise
            raise _StopCall(e, cause) from None

    call._sluice_short_interrupts = True  # type: ignore[attr-defined]
    ForeachBatchFunction.call = call  # type: ignore[method-assign]
