"""Where a JVM's CPU time went, from a Java Flight Recording (bench/peers/run --jfr DIR): the execution
samples of its threads, counted by the top frame's method (self time) and by every method on the stack
(inclusive time), the frames of the JDK's and Scala's own libraries folded into the nearest caller that
is not one of them, so that a row names the code that spent the time.

    python bench/jfr_top.py FILE.jfr [--top 25] [--thread SUBSTRING] [--between FROM_MS TO_MS]

--between keeps the samples taken in that span of the wall clock (epoch milliseconds): a moment of a
run, such as the burst of a window's final results in bench/peers' `per_window`.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
from datetime import datetime

LIBRARY = ("java.", "javax.", "jdk.", "sun.", "scala.collection.", "scala.runtime.", "scala.Predef")


def samples(path: str) -> list[tuple[str, list[str], int]]:
    """(thread name, frames top first as class.method, wall clock in epoch ms) of every jdk.ExecutionSample."""
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample", path],
                         capture_output=True, text=True, check=True).stdout
    events = json.loads(out)["recording"]["events"]
    result = []
    for e in events:
        v = e["values"]
        thread = (v.get("sampledThread") or {}).get("javaName") or "?"
        frames = [f"{f['method']['type']['name']}.{f['method']['name']}"
                  for f in (v.get("stackTrace") or {}).get("frames", [])]
        at = int(datetime.fromisoformat(v["startTime"].replace("Z", "+00:00")).timestamp() * 1000)
        result.append((thread, frames, at))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jfr")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--thread", default="", help="only threads whose name contains this")
    ap.add_argument("--between", type=int, nargs=2, metavar=("FROM_MS", "TO_MS"),
                    help="only samples taken in this span of the wall clock (epoch ms)")
    a = ap.parse_args()
    lo, hi = a.between or (0, 2**63)
    ss = [(t, f) for t, f, at in samples(a.jfr) if a.thread in t and f and lo <= at <= hi]
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    for t, frames in ss:
        threads[t.rstrip("0123456789-# ")] += 1
        own = next((f for f in frames if not f.startswith(LIBRARY)), frames[0])
        self_time[own if own == frames[0] else f"{own} (in {frames[0].rsplit('.', 2)[-2]})"] += 1
        for f in set(frames):
            inclusive[f] += 1
    n = len(ss)
    print(f"{n} samples")
    print("threads:", ", ".join(f"{k} {100 * v / n:.0f}%" for k, v in threads.most_common(8)))
    print(f"\nself (top frame, library frames folded into their caller), top {a.top}:")
    for k, v in self_time.most_common(a.top):
        print(f"  {100 * v / n:5.1f}%  {k}")
    print(f"\ninclusive (on the stack), top {a.top}:")
    for k, v in inclusive.most_common(a.top):
        print(f"  {100 * v / n:5.1f}%  {k}")


if __name__ == "__main__":
    main()
