package sluice.cache.internal

import sluice.state.CommittedIndexCache

/** The emission cache indexes of this executor, one per emission cache store. */
private[sluice] object EmitCacheIndexCache extends CommittedIndexCache[EmitCacheIndex]
