"""Stopping a stateful query while a batch runs logs nothing on sluice's in-memory window store
that Spark's own providers (HDFS-backed, RocksDB) do not, and no StackOverflowError on any: with a
sink, and with a foreachBatch function running the batch as a job (where Spark 4.1's own stop check
overflows the stack on py4j's long error text unless `sluice.configure` is used; see sluice/_stop.py)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPES = ("sink", "foreach_batch")
PROVIDERS = ("hdfs", "rocksdb", "window")


def _normalized(line: str) -> str:
    line = re.sub(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)? ", "", line)
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", line)
    return re.sub(r"\d+", "<n>", line)


def _noteworthy(lines: list[str]) -> set[str]:
    """ERROR log lines, sluice's warnings and anything printed for an uncaught throwable, normalized."""
    return {_normalized(l) for l in lines
            if " ERROR " in l or (" WARN " in l and "sluice" in l.lower())
            or l.startswith("Exception in thread") or "StackOverflowError" in l}


def test_mid_batch_stop_logs_no_more_on_window_store_than_builtin_providers(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(HERE / "stop_child.py"), str(tmp_path), ",".join(PROVIDERS)],
                       cwd=HERE, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-5000:]
    results = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert [(r["provider"], r["shape"]) for r in results] == [(n, s) for n in PROVIDERS for s in SHAPES]
    assert all(r["exception"] is None for r in results), results  # stopped, not failed

    runs: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    for line in p.stderr.splitlines():
        m = re.fullmatch(r"=== (\w+) (\w+)( end)? ===", line)
        if m:
            current = None if m.group(3) else runs.setdefault((m.group(1), m.group(2)), [])
        elif current is not None:
            current.append(line)
    assert set(runs) == {(n, s) for n in PROVIDERS for s in SHAPES}
    assert "StackOverflowError" not in p.stderr
    for shape in SHAPES:
        builtin = _noteworthy(runs["hdfs", shape]) | _noteworthy(runs["rocksdb", shape])
        assert _noteworthy(runs["window", shape]) <= builtin, (shape, _noteworthy(runs["window", shape]) - builtin)
