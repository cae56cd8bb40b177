package sluice.input.internal

import java.util.concurrent.ConcurrentHashMap

import sluice.conf.SluiceConf

/**
 * The byte bound of one source. `Fixed` comes from the source option `sluice.maxBytesPerTrigger`;
 * `Shared` is the query-wide `spark.sluice.input.buffer.max.bytes`, split evenly over the sources
 * of the query that use it, so that the query as a whole stays within it.
 */
private[sluice] sealed trait Budget {
  def bytes: Long
  def release(): Unit = ()
}

private[sluice] object Budget {
  val SourceOption: String = SluiceConf.SourceMaxBytesOption

  final case class Fixed(bytes: Long) extends Budget

  /** Sources of one query are created together, under `<checkpoint>/sources/<n>`. */
  final class Shared private[Budget] (total: Long, query: String, id: Object) extends Budget {
    override def bytes: Long = math.max(1L, total / math.max(1, members(query).size))
    override def release(): Unit = members(query).remove(id)
  }

  private val byQuery = new ConcurrentHashMap[String, java.util.Set[Object]]()
  private def members(query: String): java.util.Set[Object] =
    byQuery.computeIfAbsent(query, _ => ConcurrentHashMap.newKeySet[Object]())

  def shared(total: Long, metadataPath: String): Budget = {
    val query = metadataPath.replaceAll("/sources/[^/]+/?$", "")
    val id = new Object
    members(query).add(id)
    new Shared(total, query, id)
  }
}
