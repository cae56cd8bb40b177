"""Sinks the tests write through and read back: foreachBatch files idempotent per batch id, the
final results they hold, a query drained to them in this process, and the checkpoint's own files."""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession


def count_sum_by_key(batches: list[list[dict[str, Any]]]) -> dict[str, tuple[int, int]]:
    """What `groupBy(k).agg(count, sum(v))` yields over all `batches` of {"k", "v"} rows."""
    out: dict[str, tuple[int, int]] = {}
    for b in batches:
        for r in b:
            n, s = out.get(r["k"], (0, 0))
            out[r["k"]] = (n + 1, s + r["v"])
    return out


def batch_file_sink(out: str, to_json: Callable[[Any], Any]) -> Callable[[Any, int], None]:
    """A foreachBatch sink idempotent per batch id: each batch's rows, mapped by `to_json`, go to
    <out>/<batch id>.json, replaced atomically, so a replayed batch overwrites its own file."""
    def sink(batch: Any, batch_id: int) -> None:
        tmp = os.path.join(out, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump([to_json(r) for r in batch.collect()], f)
        os.replace(tmp, os.path.join(out, f"{batch_id:05d}.json"))
    return sink


def drain_to_files(spark: SparkSession, df: Any, sink: Callable[[Any, int], None], checkpoint: Path,
                   conf: dict[str, str]) -> None:
    """Restarts an update-mode query on `checkpoint` in this process with the session `conf` set
    (unset afterwards), writing through `sink` until all input is processed."""
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        q = (df.writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).start())
        q.processAllAvailable()
        q.stop()
    finally:
        for k in conf:
            spark.conf.unset(k)



def emitted_finals(out: Path) -> Counter:
    """The (start, user, count) rows in `out`'s batch files (suppress_kill_child.file_sink), counted."""
    got: Counter = Counter()
    for path in sorted(out.glob("*.json")):
        for r in json.load(open(path)):
            got[(r["start"], r["user"], r["count"])] += 1
    return got
