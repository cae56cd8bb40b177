"""Builds the sluice jars with the repo's sbt (dev/build-jar) so every build of the package bundles them.

One jar per supported Spark minor (conf.json's "spark" section), written to
python/sluice/jars/sluice-spark-<minor>.jar (ignored by git) before setuptools collects package
data, so a fresh clone needs nothing but Java 17 and Maven (dev/sbt fetches sbt, dev/spark-jars
the Spark jars each is compiled against): this runs for ``pip install .``, ``pip install -e .``,
``python -m build`` (sdist and wheel) alike. The sdist carries the jars next to the Scala sources,
so a wheel built from it does not compile again unless a source is newer than a jar.
"""
import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
JARS = ROOT / "python" / "sluice" / "jars"
CONF = ROOT / "jvm" / "src" / "main" / "resources" / "sluice" / "conf.json"
BUILD_JAR = ROOT / "dev" / "build-jar"

# setuptools checks that every listed package's folder exists as soon as it reads the project
# (metadata, sdist file lists), before any build step could run sbt: the jar's folder is ignored
# by git, so a fresh clone needs it made here.
JARS.mkdir(parents=True, exist_ok=True)


def _jars() -> list[Path]:
    spark = json.loads(CONF.read_text())["spark"]
    return [JARS / spark["jar"].replace("{minor}", minor) for minor in spark["supported"]]


def _jar_is_stale(jar: Path) -> bool:
    if not jar.exists():
        return True
    built = jar.stat().st_mtime
    sources = [ROOT / "build.sbt", ROOT / "project" / "build.properties",
               *(ROOT / "jvm" / "src" / "main").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


def ensure_jar() -> None:
    jars = _jars()
    if any(_jar_is_stale(j) for j in jars):
        if not BUILD_JAR.exists():
            raise RuntimeError(f"{JARS} lacks a current jar and {BUILD_JAR} is not here to build it")
        subprocess.run([str(BUILD_JAR)], check=True)
        missing = [str(j) for j in jars if not j.is_file()]
        if missing:
            raise RuntimeError(f"{BUILD_JAR} ran but left no {', '.join(missing)}")


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
