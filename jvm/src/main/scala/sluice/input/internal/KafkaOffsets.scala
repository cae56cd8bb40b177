package sluice.input.internal

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode

/**
 * Kafka source offsets in their JSON form, {"topic":{"partition":offset}}. Working on the JSON the
 * source itself reads back (`deserializeOffset`) keeps sluice off the connector's private classes.
 */
private[sluice] object KafkaOffsets {
  private val mapper = new ObjectMapper()

  def laneKey(topic: String, partition: Int): String = s"$topic/$partition"

  def positions(json: String): Map[String, Long] = {
    val root = mapper.readTree(json)
    root.properties().asScala.toSeq.flatMap { t =>
      t.getValue.properties().asScala.map(p => laneKey(t.getKey, p.getKey.toInt) -> p.getValue.asLong())
    }.toMap
  }

  def withPositions(json: String, positions: Map[String, Long]): String = {
    val root = mapper.readTree(json).asInstanceOf[ObjectNode]
    root.properties().asScala.foreach { t =>
      val parts = t.getValue.asInstanceOf[ObjectNode]
      parts.properties().asScala.toSeq.foreach { p =>
        positions.get(laneKey(t.getKey, p.getKey.toInt)).foreach(v => parts.put(p.getKey, v))
      }
    }
    mapper.writeValueAsString(root)
  }
}
