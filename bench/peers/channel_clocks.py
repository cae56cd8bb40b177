"""Simulates the event-time clocks of sluice's real-time count (bench/peers, sluice-rt) at a fixed rate: how
much later a shuffle partition's stream time (the least, over the upstream tasks, of the largest event
time each has sent to that partition) passes a window's close than both input partitions' own clocks
do, with the fixed-rate generator's input (Zipf(1.0) keys, records up to 2 s behind their send time).
Keys are spread over input and shuffle partitions at random (the real spread is by their hashes).

    python bench/peers/channel_clocks.py RATE KEYS
"""
import random, statistics, sys
rate, nkeys, disorder, trials = int(sys.argv[1]), int(sys.argv[2]), 2000, 200
w = [1 / (k + 1) for k in range(nkeys)]  # Zipf(1.0)
rnd = random.Random(7)
delays = []
for _ in range(trials):
    part = [rnd.randrange(2) for _ in range(nkeys)]      # input partition of the key
    shuf = [rnd.randrange(2) for _ in range(nkeys)]      # shuffle partition of (window, key)
    X = 10_000
    first = {}  # ("p", partition) or ("c", partition, shuffle partition) -> first send (ms) of a record with ts >= X
    keys = rnd.choices(range(nkeys), weights=w, k=int(rate * 8))
    for i, k in enumerate(keys):
        send = X - disorder + i * 1000 / rate
        ts = send - rnd.uniform(0, disorder)
        if ts >= X:
            for key in (("p", part[k]), ("c", part[k], shuf[k])):
                first.setdefault(key, send)
    every_partition = max(first[("p", j)] for j in range(2))
    for r in range(2):
        chans = [first.get(("c", j, r)) for j in range(2) if any(part[k] == j and shuf[k] == r for k in range(nkeys))]
        if all(c is not None for c in chans):
            delays.append(max(chans) - every_partition)
print(f"rate {rate}/s, {nkeys} keys: shuffle partition closes after every input partition by "
      f"p50 {statistics.median(delays):.0f} ms, p90 {sorted(delays)[int(0.9 * len(delays))]:.0f} ms, max {max(delays):.0f} ms")
