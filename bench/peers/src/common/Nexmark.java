// The Nexmark event model of bench/peers, its seeded generator and its JSON form, shared by the
// bench's tools, the Kafka Streams side and the Flink side (compiled into both class paths).
//
// The stream follows Nexmark's generator (the proportions and hot-key skew of its default
// configuration; the code is this project's own): event number n is a person when n % 50 == 0, an
// auction when n % 50 is 1..3, a bid otherwise (persons : auctions : bids = 1 : 3 : 46). Person
// and auction ids are dense, in creation order, from FIRST_ID. An auction's seller is, with
// probability 3/4, a "hot" seller (the first person of the current batch of 100 persons), otherwise
// any of the last ACTIVE_PEOPLE persons (or one of the next PERSON_LEAD ones, not yet created). A
// bid's auction is, with probability 1/2, the hot auction (the first of the current batch of 100
// auctions), otherwise any of the last IN_FLIGHT_AUCTIONS auctions (or one of the next AUCTION_LEAD);
// its bidder is, with probability 3/4, a hot bidder (the second person of the current batch of 100
// persons), otherwise an active person as for sellers. Prices are 100 * 10^(6u), u uniform in [0,1).
// Event time: event n is at BASE_MS + n * 1000 / eventRate (ms), in order: Nexmark's default, no
// out-of-order groups. Values are padded with an `extra` string to about Nexmark's average sizes
// (person 200, auction 500, bid 100 bytes of payload).
import java.util.SplittableRandom;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;

public final class Nexmark {
    public static final int PERSON_PROPORTION = 1, AUCTION_PROPORTION = 3, BID_PROPORTION = 46;
    public static final int TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;
    public static final long FIRST_ID = 1000;
    public static final int HOT_SELLER_RATIO = 4, HOT_AUCTION_RATIO = 2, HOT_BIDDER_RATIO = 4;
    public static final int HOT_BATCH = 100;
    public static final int ACTIVE_PEOPLE = 1000, PERSON_LEAD = 10, IN_FLIGHT_AUCTIONS = 100, AUCTION_LEAD = 10;
    /** 2026-01-01T00:00:00Z: a fixed start, so that one seed gives one topic. */
    public static final long BASE_MS = 1_767_225_600_000L;
    public static final int PERSON = 0, AUCTION = 1, BID = 2;

    public static final class Person {
        public long id;
        public String name, emailAddress, creditCard, city, state;
        public long dateTime;
        public String extra;
    }

    public static final class Auction {
        public long id;
        public String itemName, description;
        public long initialBid, reserve, dateTime, expires, seller, category;
        public String extra;
    }

    public static final class Bid {
        public long auction, bidder, price;
        public String channel, url;
        public long dateTime;
        public String extra;
    }

    /** One record's value: event_type and the one object of that type. */
    public static final class Event {
        public int event_type;
        public Person person;
        public Auction auction;
        public Bid bid;
    }

    private static final ObjectMapper MAPPER = new ObjectMapper()
            .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    /** A record value parsed as a user would, with Jackson data binding. */
    public static Event parse(byte[] json) {
        try {
            return MAPPER.readValue(json, Event.class);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("not a Nexmark event: " + new String(json), e);
        }
    }

    // ------------------------------------------------------------------ generator

    public static int typeOf(long n) {
        long r = n % TOTAL_PROPORTION;
        return r < PERSON_PROPORTION ? PERSON : r < PERSON_PROPORTION + AUCTION_PROPORTION ? AUCTION : BID;
    }

    /** The id (base 0) of the last person created at or before event n. */
    static long lastPerson(long n) {
        long epoch = n / TOTAL_PROPORTION, off = n % TOTAL_PROPORTION;
        return epoch * PERSON_PROPORTION + Math.min(off, PERSON_PROPORTION - 1);
    }

    /** The id (base 0) of the last auction created at or before event n (-1: none yet). */
    static long lastAuction(long n) {
        long epoch = n / TOTAL_PROPORTION, off = n % TOTAL_PROPORTION;
        if (off < PERSON_PROPORTION) return epoch * AUCTION_PROPORTION - 1;
        return epoch * AUCTION_PROPORTION + Math.min(off - PERSON_PROPORTION, AUCTION_PROPORTION - 1);
    }

    static long activePerson(long n, SplittableRandom r) {
        long people = lastPerson(n) + 1, active = Math.min(people, ACTIVE_PEOPLE);
        return people - active + r.nextLong(active + PERSON_LEAD);
    }

    static long price(SplittableRandom r) {
        return Math.round(Math.pow(10.0, r.nextDouble() * 6.0) * 100.0);
    }

    private static final String[] FIRST = {"Ada", "Bo", "Cleo", "Dmitri", "Edda", "Farid", "Greta", "Hiro", "Ines", "Jonas",
            "Kemal", "Lior"};
    private static final String[] LAST = {"Abel", "Brandt", "Costa", "Dahl", "Eriksen", "Fontaine", "Garcia", "Holm", "Ivanova"};
    private static final String[] CITIES = {"Austin", "Boise", "Denver", "Eugene", "Fresno", "Reno", "Salem", "Tucson"};
    private static final String[] STATES = {"AZ", "CA", "CO", "ID", "NV", "OR", "TX"};
    private static final String[] CHANNELS = {"web", "app", "partner", "mail"};

    static String letters(SplittableRandom r, int n) {
        char[] c = new char[n];
        for (int i = 0; i < n; i++) c[i] = (char) ('a' + r.nextInt(26));
        return new String(c);
    }

    /** The person's name: a function of its id, so that the name of any person id is known. */
    public static String personName(long id) {
        long h = id * 0x9E3779B97F4A7C15L;
        return FIRST[(int) Math.floorMod(h >>> 17, (long) FIRST.length)] + " "
                + LAST[(int) Math.floorMod(h >>> 41, (long) LAST.length)];
    }

    /** Appends `"extra":"..."` so that the JSON is about `target` bytes (at least 1 char of padding). */
    static void pad(StringBuilder sb, SplittableRandom r, int target) {
        int room = Math.max(1, target - sb.length() - 12);
        int len = room / 2 + r.nextInt(room + 1); // average ~ room, spread +-50%
        sb.append("\"extra\":\"").append(letters(r, Math.max(1, Math.min(len, 2 * room)))).append("\"}}");
    }

    /**
     * The JSON of event n at time ts. `gen` fills `ev` (the same fields the JSON carries) so that the
     * caller can feed the reference queries without parsing.
     */
    public static String json(long n, long ts, SplittableRandom r, Event ev) {
        StringBuilder sb = new StringBuilder(256);
        int type = typeOf(n);
        ev.event_type = type;
        ev.person = null;
        ev.auction = null;
        ev.bid = null;
        switch (type) {
            case PERSON -> {
                Person p = new Person();
                p.id = lastPerson(n) + FIRST_ID;
                p.name = personName(p.id);
                p.emailAddress = letters(r, 7) + "@" + letters(r, 5) + ".com";
                p.creditCard = String.format("%04d %04d %04d %04d", r.nextInt(10000), r.nextInt(10000),
                        r.nextInt(10000), r.nextInt(10000));
                p.city = CITIES[r.nextInt(CITIES.length)];
                p.state = STATES[r.nextInt(STATES.length)];
                p.dateTime = ts;
                ev.person = p;
                sb.append("{\"event_type\":0,\"person\":{\"id\":").append(p.id).append(",\"name\":\"").append(p.name)
                        .append("\",\"emailAddress\":\"").append(p.emailAddress).append("\",\"creditCard\":\"")
                        .append(p.creditCard).append("\",\"city\":\"").append(p.city).append("\",\"state\":\"")
                        .append(p.state).append("\",\"dateTime\":").append(ts).append(',');
                pad(sb, r, 200);
            }
            case AUCTION -> {
                Auction a = new Auction();
                long last = lastAuction(n);
                a.id = last + FIRST_ID;
                long seller = r.nextInt(HOT_SELLER_RATIO) > 0
                        ? (lastPerson(n) / HOT_BATCH) * HOT_BATCH : activePerson(n, r);
                a.seller = seller + FIRST_ID;
                a.category = 10 + r.nextInt(5);
                a.initialBid = price(r);
                a.reserve = a.initialBid + price(r);
                a.itemName = letters(r, 20);
                a.description = letters(r, 100);
                a.dateTime = ts;
                a.expires = ts + 1 + r.nextLong(20_000);
                ev.auction = a;
                sb.append("{\"event_type\":1,\"auction\":{\"id\":").append(a.id).append(",\"itemName\":\"")
                        .append(a.itemName).append("\",\"description\":\"").append(a.description)
                        .append("\",\"initialBid\":").append(a.initialBid).append(",\"reserve\":").append(a.reserve)
                        .append(",\"dateTime\":").append(ts).append(",\"expires\":").append(a.expires)
                        .append(",\"seller\":").append(a.seller).append(",\"category\":").append(a.category).append(',');
                pad(sb, r, 500);
            }
            default -> {
                Bid b = new Bid();
                long lastA = Math.max(lastAuction(n), 0);
                long auction = r.nextInt(HOT_AUCTION_RATIO) > 0
                        ? (lastA / HOT_BATCH) * HOT_BATCH
                        : Math.max(lastA - IN_FLIGHT_AUCTIONS, 0)
                          + r.nextLong(lastA - Math.max(lastA - IN_FLIGHT_AUCTIONS, 0) + 1 + AUCTION_LEAD);
                long bidder = r.nextInt(HOT_BIDDER_RATIO) > 0
                        ? (lastPerson(n) / HOT_BATCH) * HOT_BATCH + 1 : activePerson(n, r);
                b.auction = auction + FIRST_ID;
                b.bidder = bidder + FIRST_ID;
                b.price = price(r);
                b.channel = CHANNELS[r.nextInt(CHANNELS.length)];
                b.url = "https://example.com/" + letters(r, 8);
                b.dateTime = ts;
                ev.bid = b;
                sb.append("{\"event_type\":2,\"bid\":{\"auction\":").append(b.auction).append(",\"bidder\":")
                        .append(b.bidder).append(",\"price\":").append(b.price).append(",\"channel\":\"")
                        .append(b.channel).append("\",\"url\":\"").append(b.url).append("\",\"dateTime\":")
                        .append(ts).append(',');
                pad(sb, r, 100);
            }
        }
        return sb.toString();
    }
}
