// The Flink SQL side of bench/peers: the same queries as a Flink SQL user writes them, on the same
// local MiniCluster, checkpoints and Kafka sink as the DataStream side (PeersFlink, whose job harness
// this reuses). The input is a `kafka` table in the `json` format (`raw` keys for the count) with the
// record's timestamp as its rowtime and a watermark of the allowed lateness; the queries are Flink's
// window table-valued functions, which emit each window once, when the watermark passes its end (final
// results): window aggregations (the count, q11's SESSION), window Top-N (q5 over a HOP aggregation,
// q7 over the TUMBLE itself) and a window join (q8), written as Nexmark's Flink SQL writes them where
// the canonical row allows. Planner options are Flink's defaults. Each result row leaves through the
// DataStream API (toDataStream), joined with commas, its window timestamps as epoch milliseconds.
//
//   PeersFlinkSql --query Q --bootstrap B --input T --output O --lateness-ms L --parallelism 2
//                 [--checkpoint-ms MS --checkpoint-dir DIR]
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Map;

import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;

public final class PeersFlinkSql {
    /** The Nexmark event as the generator writes it: every field of the three kinds, as a user declares it. */
    static final String EVENT_COLUMNS = String.join(",\n  ",
            "event_type INT",
            "person ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
                    + "`dateTime` BIGINT, extra STRING>",
            "auction ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
                    + "`dateTime` BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING>",
            "bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, `dateTime` BIGINT, extra STRING>");

    /** Flink's interval literal for a lateness in milliseconds. */
    static String interval(long ms) {
        return String.format("INTERVAL '%d %02d:%02d:%02d.%03d' DAY TO SECOND(3)", ms / 86_400_000, ms / 3_600_000 % 24,
                ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    }

    static String kafka(String topic, String bootstrap, String groupId) {
        return "'connector' = 'kafka', 'topic' = '" + topic + "', 'properties.bootstrap.servers' = '" + bootstrap
                + "', 'properties.group.id' = '" + groupId + "', 'scan.startup.mode' = 'earliest-offset'";
    }

    /** The query's DDL (the input table and its views) and its SELECT. */
    static String[] sql(String q, String bootstrap, String in, long lateMs, String groupId) {
        String rowtime = "ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,\n  WATERMARK FOR ts AS ts - " + interval(lateMs);
        if (q.equals("count")) {
            // The value is read by no query, but the raw value format takes exactly one column.
            return new String[]{
                    "CREATE TABLE count_in (\n  k STRING,\n  v BYTES,\n  " + rowtime + "\n) WITH (" + kafka(in, bootstrap, groupId)
                            + ", 'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'raw', "
                            + "'value.fields-include' = 'EXCEPT_KEY')",
                    "SELECT k, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE count_in, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
                            + "GROUP BY k, window_start, window_end"};
        }
        String source = "CREATE TABLE nexmark (\n  " + EVENT_COLUMNS + ",\n  " + rowtime + "\n) WITH ("
                + kafka(in, bootstrap, groupId) + ", 'format' = 'json')";
        String bids = "CREATE TEMPORARY VIEW bids AS SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, "
                + "bid.`dateTime` AS `dateTime`, ts FROM nexmark WHERE event_type = 2";
        return switch (q) {
            case "q5" -> new String[]{source, bids,
                    "CREATE TEMPORARY VIEW auction_counts AS SELECT window_start, window_end, auction, COUNT(*) AS num\n"
                            + "FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))\n"
                            + "GROUP BY window_start, window_end, auction",
                    // Hot items, as Nexmark's q5: each window's counts joined with their maximum, ties kept
                    // (window Top-N takes ROW_NUMBER only: one row per window). Grouped by the window's own
                    // columns, the maximum stays a window aggregation and the join a window join: final rows
                    // when the watermark passes the window.
                    "SELECT C.window_start, C.auction, C.num FROM auction_counts C\n"
                            + "JOIN (\n"
                            + "  SELECT window_start, window_end, MAX(num) AS maxn FROM auction_counts\n"
                            + "  GROUP BY window_start, window_end) M\n"
                            + "ON C.window_start = M.window_start AND C.window_end = M.window_end AND C.num = M.maxn"};
            case "q7" -> new String[]{source, bids,
                    // The highest bid per window, ties broken as Queries.q7Better orders them.
                    "SELECT window_start, price, `dateTime`, auction, bidder FROM (\n"
                            + "  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end\n"
                            + "    ORDER BY price DESC, `dateTime` DESC, auction DESC, bidder DESC) AS rn\n"
                            + "  FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND)))\nWHERE rn = 1"};
            case "q8" -> new String[]{source,
                    "CREATE TEMPORARY VIEW persons AS SELECT person.id AS id, person.name AS name, ts FROM nexmark WHERE event_type = 0",
                    "CREATE TEMPORARY VIEW auctions AS SELECT auction.seller AS seller, ts FROM nexmark WHERE event_type = 1",
                    // Nexmark's q8: persons and sellers per tumbling window, joined on the window.
                    "SELECT P.window_start, P.id, P.name FROM (\n"
                            + "  SELECT id, name, window_start, window_end FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(ts), INTERVAL '10' SECOND))\n"
                            + "  GROUP BY id, name, window_start, window_end) P\n"
                            + "JOIN (\n"
                            + "  SELECT seller, window_start, window_end FROM TABLE(TUMBLE(TABLE auctions, DESCRIPTOR(ts), INTERVAL '10' SECOND))\n"
                            + "  GROUP BY seller, window_start, window_end) A\n"
                            + "ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end"};
            case "q11" -> new String[]{source, bids,
                    "SELECT bidder, window_start, window_end, COUNT(*)\n"
                            + "FROM TABLE(SESSION(TABLE bids PARTITION BY bidder, DESCRIPTOR(ts), INTERVAL '10' SECOND))\n"
                            + "GROUP BY bidder, window_start, window_end"};
            default -> throw new IllegalArgumentException("unknown query " + q);
        };
    }

    /** A result row as the canonical line: fields joined by commas, timestamps as epoch milliseconds. */
    static String line(Row r) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < r.getArity(); i++) {
            if (i > 0) sb.append(',');
            Object v = r.getField(i);
            if (v instanceof LocalDateTime t) sb.append(t.toInstant(ZoneOffset.UTC).toEpochMilli());
            else if (v instanceof Instant t) sb.append(t.toEpochMilli());
            else sb.append(v);
        }
        return sb.toString();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = PeersFlink.args(argv);
        String q = a.get("query");
        StreamExecutionEnvironment env = PeersFlink.environment(a);
        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
        // Window boundaries are TIMESTAMP(3) in the session's zone; UTC makes them the epoch's.
        tEnv.getConfig().set("table.local-time-zone", "UTC");
        String[] statements = sql(q, a.get("bootstrap"), a.get("input"), Long.parseLong(a.get("lateness-ms")),
                "flink-sql-" + a.get("output"));
        for (int i = 0; i < statements.length - 1; i++) tEnv.executeSql(statements[i]);
        Table result = tEnv.sqlQuery(statements[statements.length - 1]);
        long startMs = System.currentTimeMillis();
        DataStream<String> rows = tEnv.toDataStream(result).map(PeersFlinkSql::line).returns(Types.STRING);
        String plan = result.explain().replace("\\", "\\\\").replace("\"", "'").replace("\n", "\\n");
        PeersFlink.serve(a, env, rows, "SQL", ", \"planner options\": \"Flink's defaults\", \"plan\": \"" + plan + "\"",
                startMs);
    }
}
