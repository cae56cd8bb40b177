#!/usr/bin/env bash
# Fetches bench/peers' JVM dependencies from Maven Central and compiles its sources (into target/,
# not committed); does nothing when the poms and sources are unchanged since the last build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stamp="$here/target/.built-$(cat "$here"/pom-*.xml "$here"/src/*/*.java | cksum | cut -d' ' -f1)"
[ -f "$stamp" ] && exit 0
rm -rf "$here/target/classes-streams" "$here/target/classes-flink" "$here/target/classes-flink-sql" "$here"/target/.built-*
for side in streams flink flink-sql; do
  # Every pom in the stamp: pom-flink-sql.xml inherits pom-flink.xml's dependencies.
  stamp_lib="$here/target/lib-$side/.complete-$(cat "$here"/pom-*.xml | cksum | cut -d' ' -f1)"
  if [ ! -f "$stamp_lib" ]; then
    rm -rf "$here/target/lib-$side"
    mvn -q -f "$here/pom-$side.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$here/target/lib-$side" >&2
    touch "$stamp_lib"
  fi
done
javac -nowarn -d "$here/target/classes-streams" -cp "$here/target/lib-streams/*" \
  "$here"/src/common/*.java "$here"/src/tools/*.java "$here"/src/streams/*.java
javac -nowarn -d "$here/target/classes-flink" -cp "$here/target/lib-flink/*" \
  "$here"/src/common/*.java "$here"/src/flink/*.java
javac -nowarn -d "$here/target/classes-flink-sql" -cp "$here/target/lib-flink-sql/*" \
  "$here"/src/common/*.java "$here"/src/flink/*.java "$here"/src/flink-sql/*.java
# SendStamp and ProducerMetrics alone, for the Spark sides' Kafka sink: a jar beside the connector's
# (spark.jars), whose class loader has kafka-clients
jar cf "$here/target/sendstamp.jar" -C "$here/target/classes-streams" SendStamp.class \
  -C "$here/target/classes-streams" ProducerMetrics.class
touch "$stamp"
