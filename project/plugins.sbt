// scalafmt: dev/lint checks the Scala sources' formatting (.scalafmt.conf), dev/lint --fix applies it.
addSbtPlugin("org.scalameta" % "sbt-scalafmt" % "2.5.6")
