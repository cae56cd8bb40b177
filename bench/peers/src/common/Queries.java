// The queries of bench/peers: their windows and the canonical form of a result row, which every
// side writes as the value of one output record (key null) and the generator's reference writes too,
// so that whole outputs compare as sorted lines.
//
//   count  key,windowStartMs,count                      tumbling count per key (the windowed count; 1 minute)
//   q5     windowStartMs,auction,count                  hot items: per sliding window (10 s, every 2 s)
//                                                       the auctions with the most bids (all ties)
//   q7     windowStartMs,price,dateTimeMs,auction,bidder highest bid per 10-s tumbling window (ties: the
//                                                       largest (price, dateTime, auction, bidder))
//   q8     windowStartMs,personId,name                  persons created in a 10-s tumbling window who
//                                                       opened an auction in the same window
//   q11    bidder,sessionStartMs,sessionEndMs,count      bids per session of a bidder (gap 10 s; end =
//                                                       last bid + gap, as Spark and Flink report it)
public final class Queries {
    /** The count's window: 1 minute unless bench.py's --count-window-ms passes another (every JVM it starts). */
    public static final long COUNT_WINDOW_MS = Long.getLong("peers.countWindowMs", 60_000L);
    public static final long Q5_SIZE_MS = 10_000, Q5_SLIDE_MS = 2_000;
    public static final long Q7_SIZE_MS = 10_000, Q8_SIZE_MS = 10_000, Q11_GAP_MS = 10_000;
    /** Buckets of q7's first phase on Kafka Streams and Flink (auction & 15). */
    public static final int Q7_BUCKETS = 16;

    public static boolean nexmark(String q) {
        return !q.equals("count");
    }

    /** Is this result row one of the flush records' own (the windowed count's data ends with one
     * flush record per partition, key "~flush-<p>", whose windows never close; kept as a check)? */
    public static boolean isFlushRow(String q, String row) {
        String[] f = row.split(",", -1);
        return switch (q) {
            case "count" -> f[0].startsWith("~flush");
            case "q5", "q8" -> Long.parseLong(f[1]) < 0;
            case "q7" -> Long.parseLong(f[3]) < 0;
            case "q11" -> Long.parseLong(f[0]) < 0;
            default -> throw new IllegalArgumentException("unknown query " + q);
        };
    }

    /** The event time at which a row's window closes on every side: its end plus the allowed lateness. */
    public static long closeTime(String q, String row, long latenessMs) {
        String[] f = row.split(",", -1);
        return switch (q) {
            case "count" -> Long.parseLong(f[1]) + COUNT_WINDOW_MS + latenessMs;
            case "q5" -> Long.parseLong(f[0]) + Q5_SIZE_MS + latenessMs;
            case "q7" -> Long.parseLong(f[0]) + Q7_SIZE_MS + latenessMs;
            case "q8" -> Long.parseLong(f[0]) + Q8_SIZE_MS + latenessMs;
            case "q11" -> Long.parseLong(f[2]) + latenessMs;
            default -> throw new IllegalArgumentException("unknown query " + q);
        };
    }

    /** q7's order: price, then dateTime, auction, bidder; {price, dateTime, auction, bidder}. */
    public static boolean q7Better(long[] a, long[] b) {
        for (int i = 0; i < 4; i++) if (a[i] != b[i]) return a[i] > b[i];
        return false;
    }
}
