"""The kept late records written to Delta: ``sluice.late_records(...)`` written with
``writeStream.format("delta")`` under its own checkpoint puts each kept record in the table once,
across a clean restart of both the keeping query and the stream.

Delta's jar is a Maven artifact per Spark minor (``io.delta:delta-spark_<minor>_2.13``), resolved from
Maven Central when the child process's JVM starts (support/late_records_delta_child.py); no Python
package is needed, since the test uses no ``delta`` Python API. Minors no delta-spark release is
built for skip.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyspark
import pytest

pytestmark = pytest.mark.delta

# The newest delta-spark release built for each Spark minor sluice supports: Maven Central's
# io.delta:delta-spark_<minor>_2.13 (delta-spark 4.4.0 for 4.1 and 4.2; none for 4.3, and the newest
# delta-spark on PyPI, 4.4.1, pins pyspark <= 4.2.0).
DELTA = {"4.1": "4.4.0", "4.2": "4.4.0"}
MINOR = ".".join(pyspark.__version__.split(".")[:2])


def run_child(root: Path, run: str) -> dict:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "support" /
                                              "late_records_delta_child.py"), str(root),
                          f"io.delta:delta-spark_{MINOR}_2.13:{DELTA[MINOR]}", run],
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    errors = [line for line in out.stderr.splitlines() if "Exception" in line or "Error" in line][:20]
    assert out.returncode == 0 and lines, "\n".join(errors) or out.stderr[-4000:]
    result: dict = json.loads(lines[-1][len("RESULT "):])
    return result


@pytest.mark.skipif(MINOR not in DELTA, reason=f"no delta-spark release is built for Spark {MINOR} "
                    f"(Maven Central has no io.delta:delta-spark_{MINOR}_2.13)")
def test_each_kept_record_lands_in_the_delta_table_once_across_restarts(tmp_path: Path) -> None:
    first = run_child(tmp_path, "1")
    assert [r[2:] for r in first["table"]] == [["a", "2024-01-01 00:00:50", 5000], ["c", "2024-01-01 00:00:55", 5000]]
    assert first["table"] == first["kept"]
    second = run_child(tmp_path, "2")  # both queries restarted on their checkpoints
    assert second["before"] == first["table"]  # the restarted stream delivered nothing again
    assert [r[2:] for r in second["table"]] == [["a", "2024-01-01 00:00:50", 5000], ["c", "2024-01-01 00:00:55", 5000],
                                                ["d", "2024-01-01 00:01:10", 1000]]
    assert second["table"] == second["kept"]
    assert max(Counter(map(tuple, second["table"])).values()) == 1
