package sluice

import java.util.UUID
import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import org.apache.logging.log4j.{Level, LogManager}
import org.apache.logging.log4j.core.{LogEvent, Logger => CoreLogger}
import org.apache.logging.log4j.core.appender.AbstractAppender
import org.apache.logging.log4j.core.config.{Configurator, Property}

import sluice.rewrites.NotApplied

/** What the logger `sluice.rewrites` ([[NotApplied]]) says while a test's code runs. */
object RewritesLog {

  /** `body`'s result and the "LEVEL message" lines logged while it ran. */
  def capture[T](body: => T): (T, Seq[String]) = {
    val lines = new ConcurrentLinkedQueue[String]()
    val appender = new AbstractAppender(s"sluice-rewrites-${UUID.randomUUID()}", null, null, true,
      Property.EMPTY_ARRAY) {
      override def append(e: LogEvent): Unit = lines.add(s"${e.getLevel} ${e.getMessage.getFormattedMessage}")
    }
    appender.start()
    Configurator.setLevel(NotApplied.LoggerName, Level.INFO)
    val logger = LogManager.getLogger(NotApplied.LoggerName).asInstanceOf[CoreLogger]
    logger.addAppender(appender)
    val result =
      try body
      finally {
        logger.removeAppender(appender)
        appender.stop()
      }
    (result, lines.asScala.toSeq)
  }
}
