"""The one harness sluice's Python benchmarks run through.

Every benchmark: prints what it compares and the comparator's settings first; runs a warm-up of
each side that is not measured; runs N repeats with the sides alternating (A B, B A, A B, ...) so
that no side is favoured by its place in the JVM's life; prints each target as met or missed; and
writes one machine-readable result file per run under ``bench/results/`` (not committed), from
which ``bench/report.py`` writes ``bench/RESULTS.md`` and its plots.

Usage from a benchmark script::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness import Harness

    h = Harness("cache_scan", "what is compared", {"comparator": "RocksDB, defaults", ...})
    runs = h.alternating(["without", "with"], repeats=2, run=lambda side, i: {...}, warmup=...)
    h.target("median batch time with/without", ratio, "<=", 1.1)
    h.write()
"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

RESULTS = Path(__file__).resolve().parent / "results"


class Harness:
    def __init__(self, name: str, description: str, settings: dict[str, Any]):
        self.name, self.description, self.settings = name, description, settings
        self.runs: dict[str, list[dict[str, Any]]] = {}
        self.targets: list[dict[str, Any]] = []
        self.started = datetime.now(timezone.utc)
        # The checkout the run starts from: what is edited while it runs is not what it measures.
        self.commit = _commit()
        # How fast a core of this machine is today: runs are comparable only at a like figure.
        self.core_probe_ms = core_probe_ms()
        print(f"== bench {name}: {description}")
        print(f"   core probe: {self.core_probe_ms} ms (fixed single-thread work, best of 3; lower is faster)")
        for k, v in settings.items():
            print(f"   {k}: {v}")

    def alternating(self, sides: Sequence[str], repeats: int, run: Callable[[str, int], dict[str, Any]],
                    warmup: Callable[[str], Any] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Runs `run(side, repeat)` for every side, `repeats` times, the order alternating; a
        `warmup(side)` per side first, not measured."""
        if warmup is not None:
            for side in sides:
                warmup(side)
        for i in range(repeats):
            for side in _order(sides, i):
                t0 = time.monotonic()
                result = run(side, i)
                result.setdefault("wall_s", round(time.monotonic() - t0, 3))
                self._record(side, i, result)
        return self.runs

    def alternating_together(self, sides: Sequence[str], repeats: int,
                             run: Callable[[list[str], int], dict[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        """For a benchmark that measures every side in one process (one JVM per repeat, warming
        itself up): `run(order, repeat)` runs the sides in `order`, which alternates as in
        `alternating`, and returns each side's figures."""
        for i in range(repeats):
            order = _order(sides, i)
            results = run(order, i)
            for side in order:
                self._record(side, i, results[side])
        return self.runs

    def _record(self, side: str, i: int, result: dict[str, Any]) -> None:
        self.runs.setdefault(side, []).append(result)
        print(f"   repeat {i + 1} {side}: " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in result.items() if not isinstance(v, (list, dict))))

    def target(self, name: str, value: float, op: str, bound: float) -> bool:
        """Prints and records one target: `value op bound`, op one of <=, >=."""
        met = value <= bound if op == "<=" else value >= bound
        self.targets.append({"name": name, "value": value, "op": op, "bound": bound, "met": met})
        print(f"   target {name}: {value:.3f} (target {op} {bound}): {'met' if met else 'MISSED'}")
        return met

    def write(self, **extra: Any) -> Path:
        """The run's result file: settings, every run's figures, every target."""
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.name}-{self.started:%Y%m%dT%H%M%SZ}.json"
        path.write_text(json.dumps({
            "bench": self.name, "description": self.description, "started": self.started.isoformat(),
            "commit": self.commit, "spark": _spark(), "argv": sys.argv, "machine": {"cpus": _cpus(), "python": platform.python_version(),
                                             "platform": platform.platform(), "core_probe_ms": self.core_probe_ms},
            "settings": self.settings, "runs": self.runs, "targets": self.targets, **extra,
        }, indent=1, default=str) + "\n")
        print(f"   results: {path}")
        return path


def _order(sides: Sequence[str], repeat: int) -> list[str]:
    """A B, B A, A B, ...: no side is favoured by its place in the process's life."""
    return list(sides) if repeat % 2 == 0 else list(reversed(sides))


def _spark() -> str:
    """The pyspark the bench ran with, or "" when it loaded none (a bench of other engines only)."""
    pyspark = sys.modules.get("pyspark")
    return str(getattr(pyspark, "__version__", "")) if pyspark else ""


def _commit() -> str:
    """The checkout's commit (with "+dirty" for uncommitted changes), or "" outside git."""
    import subprocess
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return sha + ("+dirty" if sha and dirty else "")


def core_probe_ms() -> float:
    """The best of three timings of one fixed single-threaded piece of work (an integer loop): a
    figure of the core's speed at the run's start. Cores of one kind of machine differ from day to day
    (another tenant, another host), and a run's figures are comparable with another's only when their
    probes are alike."""
    def once() -> float:
        t0 = time.perf_counter()
        s = 0
        for i in range(2_000_000):
            s += i ^ (i >> 3)
        return (time.perf_counter() - t0) * 1000
    return round(min(once() for _ in range(3)), 1)


def _cpus() -> int:
    import os
    return os.cpu_count() or 0


def spread(*sides: Sequence[float]) -> float:
    """The run-to-run spread of the sides' measurements: the largest relative range (max - min) / median
    among them. A gain of one side over another counts only beyond it."""
    return max((max(xs) - min(xs)) / statistics.median(xs) for xs in sides)
