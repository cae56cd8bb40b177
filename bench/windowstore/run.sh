#!/usr/bin/env bash
# Side-by-side benchmark: in-memory window store vs HDFS-backed vs RocksDB providers.
# Usage: bench/windowstore/run.sh [stateRows batchRows smallKeys largeKeys e2eBatchRows]
# Defaults: 1000000 100000 50000 5000000 20000. Needs ~6 GB heap for the 5M-key end-to-end case.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
heap=${BENCH_HEAP:-6g}
exec ./dev/sbt "set Test / javaOptions := (Test / javaOptions).value.filterNot(_.startsWith(\"-Xmx\")) :+ \"-Xmx$heap\"" \
  "Test/runMain sluice.windowstore.WindowStoreBenchmark $*"
