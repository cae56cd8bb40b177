package sluice.suppress.internal

import sluice.state.CommittedIndexCache

/** The suppression buffer indexes of this executor, one per buffer store. */
private[sluice] object BufferIndexCache extends CommittedIndexCache[BufferIndex]
