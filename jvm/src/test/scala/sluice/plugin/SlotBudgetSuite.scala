package sluice.plugin

import org.scalatest.funsuite.AnyFunSuite

import sluice.conf.SlotBudget

class SlotBudgetSuite extends AnyFunSuite {
  test("the cache budget is split evenly over executor cores / task cpus") {
    val b = SlotBudget.of("1", SlotBudget.slots(executorCores = 4, taskCpus = 2), 12L << 20, inputBufferMaxBytes = 1L)
    assert(b.taskSlots == 2)
    assert(b.cacheBytesPerSlot == (6L << 20))
  }

  test("at least one slot") {
    assert(SlotBudget.slots(executorCores = 1, taskCpus = 4) == 1)
  }

  test("executor cores as the driver sees them") {
    assert(SluicePlugin.executorCores("local", None).contains(1))
    assert(SluicePlugin.executorCores("local[3]", None).contains(3))
    assert(SluicePlugin.executorCores("local[2, 4]", None).contains(2))
    assert(SluicePlugin.executorCores("local[*]", None).contains(Runtime.getRuntime.availableProcessors()))
    assert(SluicePlugin.executorCores("local-cluster[2,1,1024]", None).contains(1))
    assert(SluicePlugin.executorCores("spark://h:7077", Some(5)).contains(5))
    assert(SluicePlugin.executorCores("spark://h:7077", None).isEmpty)
  }
}
