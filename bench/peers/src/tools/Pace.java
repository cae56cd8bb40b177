// The one send loop of bench/peers' producers (the Nexmark stream and the windowed count's records):
// events 0, 1, 2, ... either as fast as the producer takes them (a backlog of `events`), or paced at
// `rate` per second of wall-clock time for a duration (a live stream, whose event time is the send
// time). A live send more than 100 ms behind its schedule is counted: the producer, not the side
// under test, was slow then.
final class Pace {
    interface Send {
        void send(long n) throws Exception;
    }

    long sent, lateSends;
    double seconds;

    static Pace backlog(long events, Send s) throws Exception {
        Pace p = new Pace();
        long t0 = System.nanoTime();
        for (; p.sent < events; p.sent++) s.send(p.sent);
        p.seconds = (System.nanoTime() - t0) / 1e9;
        return p;
    }

    static Pace live(double rate, long durationMs, Send s) throws Exception {
        Pace p = new Pace();
        long startNs = System.nanoTime();
        while (true) {
            long due = startNs + (long) (p.sent * 1e9 / rate), now = System.nanoTime();
            if (due - startNs >= durationMs * 1_000_000L) break;
            if (due > now) {
                long wait = due - now;
                // Sleeps below ~0.2 ms overshoot by more than they wait: spin instead.
                if (wait > 200_000) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                continue;
            }
            if (now - due > 100_000_000L) p.lateSends++;
            s.send(p.sent++);
        }
        p.seconds = (System.nanoTime() - startNs) / 1e9;
        return p;
    }

    String summary() {
        return "\"produce_s\": " + String.format("%.2f", seconds) + ", \"achieved_rate\": "
                + String.format("%.0f", sent / seconds) + ", \"sends_over_100ms_late\": " + lateSends;
    }
}
