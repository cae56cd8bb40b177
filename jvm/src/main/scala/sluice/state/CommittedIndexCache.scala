package sluice.state

import scala.jdk.CollectionConverters._

import sluice.spark.StateStoreTypes.{StateStore, StateStoreProviderId}

/**
 * An executor's in-memory indexes over state stores (what a feature keeps beside a store so a
 * batch need not scan it), each tagged with the store version (and checkpoint id, where the store
 * has them) whose contents it reflects.
 *
 * A task takes its store's index out of the cache when it opens the store and offers it back
 * only once the store has committed, tagged with the version the commit created. So a batch that
 * continues from the version it committed last finds its index; a task that fails or aborts never
 * offers its (now wrong) index back; and a task opening any other version (a replay, a restart, a
 * partition that ran elsewhere in between) finds nothing and rebuilds from a full store scan. Since
 * a taken index is out of the cache, two attempts of one partition never share one.
 *
 * A version number stands for one content: an attempt that commits a version again (a replayed
 * batch) writes what the first wrote, as Spark's own providers assume when they cache versions.
 */
private[sluice] class CommittedIndexCache[T <: AnyRef] {
  import CommittedIndexCache.Cached

  // Guarded by this. Keys identify a store (operators use Spark's provider ids).
  private val cached = new java.util.HashMap[AnyRef, Cached[T]]()

  /** The index of `store` at `version`, removed from the cache; None when none reflects it. */
  def take(store: AnyRef, version: Long, checkpointId: Option[String]): Option[T] = synchronized {
    Option(cached.remove(store)).collect {
      case Cached(v, id, index) if v == version && id == checkpointId => index
    }
  }

  /** Keeps `index` as the index of `store` at `version` (a version the store has committed). */
  def offer(store: AnyRef, version: Long, checkpointId: Option[String], index: T): Unit = synchronized {
    cached.put(store, Cached(version, checkpointId, index))
  }

  /** Drops the indexes of stores `keep` rejects (e.g. stores no longer loaded on this executor). */
  def retain(keep: AnyRef => Boolean): Unit = synchronized {
    cached.keySet.asScala.filterNot(keep).toList.foreach(cached.remove)
  }

  /** Drops the indexes of stores this executor no longer has loaded (other runs, moved partitions). */
  def retainLoaded(): Unit = retain {
    case id: StateStoreProviderId => StateStore.isLoaded(id)
    case _ => true
  }
}

private object CommittedIndexCache {
  final case class Cached[T](version: Long, checkpointId: Option[String], index: T)
}
