"""Builds the sluice jar with the repo's sbt (dev/build-jar) so the package always bundles it."""
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
JAR = ROOT / "python" / "sluice" / "jars" / "sluice.jar"


def _jar_is_stale() -> bool:
    if not JAR.exists():
        return True
    built = JAR.stat().st_mtime
    sources = [ROOT / "build.sbt", *(ROOT / "jvm" / "src" / "main").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


class BuildPyWithJar(build_py):
    def run(self) -> None:
        if _jar_is_stale():
            subprocess.run([str(ROOT / "dev" / "build-jar")], check=True)
        super().run()


setup(cmdclass={"build_py": BuildPyWithJar})
