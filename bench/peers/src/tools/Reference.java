// The generator's own answer to every Nexmark query of bench/peers, computed as the events are made
// (in event-time order) with plain maps: a fourth implementation that each side's output is compared
// with, row by row. Rows are in the canonical form of Queries.
import java.util.*;

final class Reference {
    final List<String> q5 = new ArrayList<>(), q7 = new ArrayList<>(), q8 = new ArrayList<>(), q11 = new ArrayList<>();
    /** Two consecutive bids of one bidder exactly the session gap apart (same session on every side). */
    long sessionGapTies;

    private final TreeMap<Long, Map<Long, long[]>> q5Open = new TreeMap<>();
    private final TreeMap<Long, long[]> q7Open = new TreeMap<>();
    private final TreeMap<Long, Map<Long, String>> q8Persons = new TreeMap<>();
    private final TreeMap<Long, Set<Long>> q8Sellers = new TreeMap<>();
    private final Map<Long, long[]> q11Open = new HashMap<>(); // bidder -> {start, last, count}
    private long lastTs = Long.MIN_VALUE, sweptAt = 0;

    void accept(Nexmark.Event e, long ts) {
        if (ts < lastTs) throw new IllegalStateException("events must come in event-time order");
        lastTs = ts;
        closeBefore(ts);
        switch (e.event_type) {
            case Nexmark.PERSON -> q8Persons.computeIfAbsent(Math.floorDiv(ts, Queries.Q8_SIZE_MS) * Queries.Q8_SIZE_MS,
                    k -> new HashMap<>()).put(e.person.id, e.person.name);
            case Nexmark.AUCTION -> q8Sellers.computeIfAbsent(Math.floorDiv(ts, Queries.Q8_SIZE_MS) * Queries.Q8_SIZE_MS,
                    k -> new HashSet<>()).add(e.auction.seller);
            default -> {
                Nexmark.Bid b = e.bid;
                long last = Math.floorDiv(ts, Queries.Q5_SLIDE_MS) * Queries.Q5_SLIDE_MS;
                for (long ws = last; ws > ts - Queries.Q5_SIZE_MS; ws -= Queries.Q5_SLIDE_MS)
                    q5Open.computeIfAbsent(ws, k -> new HashMap<>()).computeIfAbsent(b.auction, k -> new long[1])[0]++;
                long w7 = Math.floorDiv(ts, Queries.Q7_SIZE_MS) * Queries.Q7_SIZE_MS;
                long[] cand = {b.price, b.dateTime, b.auction, b.bidder};
                long[] best = q7Open.get(w7);
                if (best == null || Queries.q7Better(cand, best)) q7Open.put(w7, cand);
                long[] s = q11Open.get(b.bidder);
                if (s != null && ts - s[1] > Queries.Q11_GAP_MS) {
                    q11.add(b.bidder + "," + s[0] + "," + (s[1] + Queries.Q11_GAP_MS) + "," + s[2]);
                    s = null;
                }
                if (s == null) q11Open.put(b.bidder, new long[]{ts, ts, 1});
                else {
                    if (ts - s[1] == Queries.Q11_GAP_MS) sessionGapTies++;
                    s[1] = ts;
                    s[2]++;
                }
            }
        }
    }

    /** Finishes every window that ends at or before ts (no later event can fall in it). */
    private void closeBefore(long ts) {
        while (!q5Open.isEmpty() && q5Open.firstKey() + Queries.Q5_SIZE_MS <= ts) finishQ5(q5Open.pollFirstEntry());
        while (!q7Open.isEmpty() && q7Open.firstKey() + Queries.Q7_SIZE_MS <= ts) finishQ7(q7Open.pollFirstEntry());
        while (!q8Persons.isEmpty() && q8Persons.firstKey() + Queries.Q8_SIZE_MS <= ts) finishQ8(q8Persons.pollFirstEntry());
        while (!q8Sellers.isEmpty() && q8Sellers.firstKey() + Queries.Q8_SIZE_MS <= ts) q8Sellers.pollFirstEntry();
        // Sessions: swept once per gap of event time, so that the open map holds only live bidders.
        if (ts - sweptAt >= Queries.Q11_GAP_MS) {
            sweptAt = ts;
            for (Iterator<Map.Entry<Long, long[]>> it = q11Open.entrySet().iterator(); it.hasNext(); ) {
                Map.Entry<Long, long[]> en = it.next();
                long[] s = en.getValue();
                if (ts - s[1] > Queries.Q11_GAP_MS) {
                    q11.add(en.getKey() + "," + s[0] + "," + (s[1] + Queries.Q11_GAP_MS) + "," + s[2]);
                    it.remove();
                }
            }
        }
    }

    private void finishQ5(Map.Entry<Long, Map<Long, long[]>> w) {
        long max = 0;
        for (long[] c : w.getValue().values()) max = Math.max(max, c[0]);
        for (Map.Entry<Long, long[]> a : w.getValue().entrySet())
            if (a.getValue()[0] == max) q5.add(w.getKey() + "," + a.getKey() + "," + max);
    }

    private void finishQ7(Map.Entry<Long, long[]> w) {
        long[] b = w.getValue();
        q7.add(w.getKey() + "," + b[0] + "," + b[1] + "," + b[2] + "," + b[3]);
    }

    private void finishQ8(Map.Entry<Long, Map<Long, String>> w) {
        Set<Long> sellers = q8Sellers.getOrDefault(w.getKey(), Set.of());
        for (Map.Entry<Long, String> p : w.getValue().entrySet())
            if (sellers.contains(p.getKey())) q8.add(w.getKey() + "," + p.getKey() + "," + p.getValue());
    }

    /** Closes every window and session (the caller keeps those that close by its cut). */
    void finish() {
        closeBefore(Long.MAX_VALUE / 2);
        for (Map.Entry<Long, long[]> en : q11Open.entrySet()) {
            long[] s = en.getValue();
            q11.add(en.getKey() + "," + s[0] + "," + (s[1] + Queries.Q11_GAP_MS) + "," + s[2]);
        }
        q11Open.clear();
    }

    Map<String, List<String>> rows() {
        return Map.of("q5", q5, "q7", q7, "q8", q8, "q11", q11);
    }
}
