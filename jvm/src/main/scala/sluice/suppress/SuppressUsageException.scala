package sluice.suppress

/** A misuse of `suppress` found while building the DataFrame; the message says what to do. */
final class SuppressUsageException(message: String) extends RuntimeException(message)
