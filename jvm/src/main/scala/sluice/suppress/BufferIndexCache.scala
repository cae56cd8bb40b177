package sluice.suppress

import sluice.state.CommittedIndexCache

/** The suppression buffer indexes of this executor, one per buffer store. */
object BufferIndexCache extends CommittedIndexCache[BufferIndex]
