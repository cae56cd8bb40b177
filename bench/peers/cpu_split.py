"""Where a drain's CPU went: core-seconds of each group of threads of a side's processes and of the
broker, read from /proc while the drain runs.

On two cores a side's own work is only part of its drain: a JVM started cold spends much of the
drain compiling (HotSpot's C1 and C2 threads) and collecting, and the broker serves the same cores.
Spark's threads are also split into its task threads (the query's per-record work) and its
micro-batch thread (the driver's planning and commits between tasks).

Threads are read every `PERIOD_S` so that one that ends during the drain still counts up to its
last reading; a thread first seen after the start counts from its creation.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

PERIOD_S = 0.5
TICKS = os.sysconf("SC_CLK_TCK")

# Thread names as Linux keeps them (15 bytes), by group; the first group whose prefix a name has.
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("jit", ("C1 CompilerThre", "C2 CompilerThre")),
    ("gc", ("GC Thread", "G1 ")),
    ("tasks", ("Executor task",)),  # Spark's task threads
    ("batches", ("stream executio",)),  # Spark's micro-batch thread (the driver)
]


def group(name: str) -> str:
    return next((g for g, prefixes in GROUPS if name.startswith(prefixes)), "other")


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
                children.setdefault(ppid, []).append(int(d.name))
            except (OSError, ValueError):
                pass
    return children


def _descendants(roots: list[int], children: dict[int, list[int]]) -> list[int]:
    """The processes `roots` and all their descendants (a Spark side is Python starting a JVM)."""
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _threads(pid: int) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, tid) -> (name, CPU ticks so far) of each thread of `pid`."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[(pid, int(tid))] = (stat[stat.index("(") + 1:stat.rindex(")")], int(fields[11]) + int(fields[12]))
    return out


class CpuSplit:
    """Core-seconds per part ('side', 'broker') and group of threads, between `start` and `stop`."""

    def __init__(self, parts: dict[str, Callable[[], list[int]]]) -> None:
        # part -> the root processes it is made of (read again each time: a side may start its JVM late)
        self.parts = parts
        self.first: dict[tuple[int, int], int] = {}
        self.last: dict[tuple[int, int], tuple[str, str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self, initial: bool) -> None:
        children = _children()  # one pass over /proc per reading, for every part
        for part, roots in self.parts.items():
            for pid in _descendants(roots(), children):
                for key, (name, ticks) in _threads(pid).items():
                    if initial:
                        self.first[key] = ticks
                    self.last[key] = (part, name, ticks)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self._read(False)

    def start(self) -> "CpuSplit":
        self._read(True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        self._thread.join()
        self._read(False)
        out: dict[str, dict[str, float]] = {}
        for key, (part, name, ticks) in self.last.items():
            used = (ticks - self.first.get(key, 0)) / TICKS
            if used > 0:
                g = out.setdefault(part, {})
                g[group(name)] = round(g.get(group(name), 0.0) + used, 2)
        return out
