"""Builds the sluice jar with the repo's sbt (dev/build-jar) so every build of the package bundles it.

The jar is written to python/sluice/jars/sluice.jar (ignored by git) before setuptools collects
package data, so a fresh clone needs nothing but Java 17 and Maven (dev/sbt fetches sbt): this runs
for ``pip install .``, ``pip install -e .``, ``python -m build`` (sdist and wheel) alike. The sdist
carries the jar next to the Scala sources, so a wheel built from it does not compile again unless
a source is newer than the jar.
"""
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
JAR = ROOT / "python" / "sluice" / "jars" / "sluice.jar"
BUILD_JAR = ROOT / "dev" / "build-jar"

# setuptools checks that every listed package's folder exists as soon as it reads the project
# (metadata, sdist file lists), before any build step could run sbt: the jar's folder is ignored
# by git, so a fresh clone needs it made here.
JAR.parent.mkdir(parents=True, exist_ok=True)


def _jar_is_stale() -> bool:
    if not JAR.exists():
        return True
    built = JAR.stat().st_mtime
    sources = [ROOT / "build.sbt", ROOT / "project" / "build.properties",
               *(ROOT / "jvm" / "src" / "main").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


def ensure_jar() -> None:
    if _jar_is_stale():
        if not BUILD_JAR.exists():
            raise RuntimeError(f"{JAR} is missing and {BUILD_JAR} is not here to build it")
        subprocess.run([str(BUILD_JAR)], check=True)
        if not JAR.is_file():
            raise RuntimeError(f"{BUILD_JAR} ran but left no {JAR}")


class BuildPyWithJar(build_py):
    """Also runs for editable installs (where build_py itself copies nothing): the editable
    package then finds the jar in the source tree."""

    def run(self) -> None:
        ensure_jar()
        # package data is globbed on first use; drop any list made before the jar existed
        self.__dict__.pop("data_files", None)
        super().run()


class SdistWithJar(sdist):
    def run(self) -> None:
        ensure_jar()
        super().run()


setup(cmdclass={"build_py": BuildPyWithJar, "sdist": SdistWithJar})
