"""Input the tests feed: hourly files of the suppress kill tests (and the final results they make),
and a query fed one file per micro-batch."""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession

HOURLY_USERS = ["a", "b", "c", "a"]


def _hourly_users(h: int) -> list[str]:
    return HOURLY_USERS[: 2 + h % 3]


def write_hourly_files(src: Path, hours: int | range, ts: Callable[[float], str]) -> None:
    """Input of the suppress kill tests, one file per micro-batch: file h holds 2 to 4 events
    (users a, b, c, a) in hour h, so it closes hour h - 1; `ts` formats seconds after the module's T0.
    The files are dated in order, as the file source takes them. `hours`: a count from hour 0, or a
    range of hours (to add files to a stream that has read the earlier ones)."""
    for h in (range(hours) if isinstance(hours, int) else hours):
        with open(src / f"{h:03d}.json", "w") as f:
            for i, user in enumerate(_hourly_users(h)):
                f.write(json.dumps({"ts": ts(h * 3600 + 900 + i * 60), "user": user, "v": 1}) + "\n")
        os.utime(src / f"{h:03d}.json", (1_700_000_000 + h, 1_700_000_000 + h))


def hourly_finals(hours: int, hour_start: Callable[[int], str]) -> Counter:
    """The final results of `hours` hourly files (write_hourly_files) under suppress_kill_child's query,
    each once, as (hour start as `hour_start(h)` gives it, user, count): every hour but the last,
    which stays open."""
    expected: Counter = Counter()
    for h in range(hours - 1):
        users = _hourly_users(h)
        for user in set(users):
            expected[(hour_start(h), user, users.count(user))] = 1
    return expected


class FileFedQuery:
    """A streaming query fed one JSON file per micro-batch from `root`/in; its progress is kept
    across restarts. Subclasses start `self.query`."""

    def __init__(self, spark: SparkSession, root: Path):
        self.spark, self.root = spark, root
        self.inputs = root / "in"
        self.inputs.mkdir(parents=True, exist_ok=True)
        self.n = 0
        self.progress: list[dict] = []
        self.query: Any = None

    def feed(self, rows: list[dict[str, Any]], wait: bool = True) -> None:
        (self.inputs / f"part-{self.n:05d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        self.n += 1
        if wait:
            self.query.processAllAvailable()

    def stop(self) -> None:
        self.progress += [json.loads(p.json) for p in self.query.recentProgress]
        self.query.stop()
