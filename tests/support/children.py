"""Child processes killed mid-run: a script of this package started in its own process group and
SIGKILLed with its driver JVM once the parent sees what it waits for."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable


def kill_after_batches(script: str, args: list[str], out: Path, batches: int, timeout: float = 180.0) -> None:
    """Runs tests/support/<script> (a query writing through `batch_file_sink` into `out`) in its own process
    group and SIGKILLs the whole group, driver JVM included, once `batches` batch files exist."""
    kill_when(script, args, lambda: len(list(out.glob("*.json"))) >= batches, timeout)


def kill_when(script: str, args: list[str], ready: Callable[[], bool], timeout: float = 180.0) -> None:
    """Runs tests/support/<script> in its own process group and SIGKILLs the whole group, driver JVM
    included, once `ready()` holds."""
    child = subprocess.Popen([sys.executable, str(Path(__file__).parent / script), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert child.poll() is None, "child query died"
            assert time.monotonic() < deadline, "child query made no progress"
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


