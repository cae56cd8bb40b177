"""Install routes from a fresh clone of this repository's HEAD (commit what you want tested):
`python -m build`, `pip install .`, `pip install -e .`, and the Maven artifact through
`spark-submit --packages`. These run sbt in the clone. The clone starts with this checkout's compiled
classes and sbt's records of them (jvm/target/spark-<minor>/scala-2.13, which dev/setup made from the
same sources when the checkout is clean), so sbt compiles only the sources that differ from them and
packages the jars itself; the compile of a clone that has nothing is CI's own first step (dev/setup in
a fresh clone). The git-ignored jar folder is removed before each route, which is what a fresh clone
lacks. Deselect with `-m "not install"`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
VERSION = (ROOT / "VERSION").read_text().strip()  # build.sbt and pyproject.toml read it
SPARK = json.loads((ROOT / "jvm" / "src" / "main" / "resources" / "sluice" / "conf.json").read_text())["spark"]
MINORS = list(SPARK["supported"])


def running_minor() -> str:
    from pyspark.version import __version__

    return ".".join(__version__.split(".")[:2])


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 600) -> str:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("install") / "sluice"
    run(["git", "clone", "-q", ROOT, path])
    assert not (path / "python" / "sluice" / "jars").exists()  # as in any fresh clone
    for minor in MINORS:  # sbt's output but no jar (module doc)
        compiled = ROOT / "jvm" / "target" / f"spark-{minor}" / "scala-2.13"
        if (compiled / "zinc").is_dir():
            (path / "jvm" / "target" / f"spark-{minor}").mkdir(parents=True)
            run(["cp", "-a", compiled, path / "jvm" / "target" / f"spark-{minor}" / "scala-2.13"])
    return path


def fresh_venv(path: Path) -> Path:
    """A virtualenv without this project, seeing the test venv's other packages (pip, setuptools,
    wheel, pyspark) through symlinks, so nothing is downloaded; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    deps = path / "deps"
    deps.mkdir()
    for entry in SITE.iterdir():
        name = entry.name.lower()
        if name.endswith(".pth") or name.startswith(("sluice", "spark_sluice", "__editable__", "__pycache__")):
            continue
        (deps / entry.name).symlink_to(entry)
    (path / "lib" / SITE.parent.name / "site-packages" / "deps.pth").write_text(f"{deps}\n")
    return path / "bin" / "python"


def forget_jar(clone: Path) -> None:
    subprocess.run(["rm", "-rf", clone / "python" / "sluice" / "jars"], check=True)


def installed_jar(python: Path) -> Path:
    out = run([python, "-c", "import sluice; print(sluice.__file__); print(sluice.jar_path())"])
    module, jar = out.split()[:2]
    assert "deps" not in Path(module).parts, module  # not the test venv's sluice
    with zipfile.ZipFile(jar) as z:
        assert "sluice/plugin/SluicePlugin.class" in z.namelist()
    return Path(jar)


@pytest.mark.build  # builds every minor's jar whichever minor runs it: once per stop is enough
def test_python_build_makes_sdist_and_wheel_with_the_jar(clone: Path, tmp_path: Path) -> None:
    out = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp_path, clone])
    # the jars came from sbt in the clone, not from anywhere else
    assert f"set current project to root (in build file:{clone}/)" in out, out[-2000:]
    with zipfile.ZipFile(tmp_path / f"spark_sluice-{VERSION}-py3-none-any.whl") as whl:
        names = whl.namelist()
        assert {f"sluice/jars/sluice-spark-{m}.jar" for m in MINORS} | {"sluice/__init__.py"} <= set(names)
        meta = whl.read(f"spark_sluice-{VERSION}.dist-info/METADATA").decode()
        requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist: pyspark")]
        # a range over the supported minors, never a pin (which would replace the user's pyspark)
        assert "Name: spark-sluice" in meta and requires and "==" not in requires[0], requires
        assert ">=4.1" in requires[0] and "<4.4" in requires[0], requires
    with tarfile.open(tmp_path / f"spark_sluice-{VERSION}.tar.gz") as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"build.sbt", "dev/sbt", "dev/build-jar", "project/build.properties",
            "jvm/src/main/scala/sluice/plugin/SluicePlugin.scala", "dev/spark-jars", "dev/spark-versions",
            *(f"python/sluice/jars/sluice-spark-{m}.jar" for m in MINORS),
            *(f"jvm/src/main/spark-{m}/sluice/spark/SparkShim.scala" for m in MINORS)} <= names


@pytest.mark.other_minor  # CI: the install routes run on another minor's half (marker install)
def test_pip_install_from_clone(clone: Path, tmp_path: Path) -> None:
    forget_jar(clone)
    python = fresh_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", clone])
    jar = installed_jar(python)
    assert jar.is_relative_to(tmp_path / "venv" / "lib")
    assert jar.name == f"sluice-spark-{running_minor()}.jar"  # chosen by the installed pyspark


@pytest.mark.every_minor
def test_pip_install_keeps_the_installed_pyspark(clone: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    report = tmp_path / "report.json"
    run([python, "-m", "pip", "install", "-q", "--dry-run", "--no-build-isolation", "--report", report, clone])
    to_install = [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]]
    assert to_install == ["spark-sluice"]  # the pyspark already installed satisfies the range


@pytest.mark.other_minor  # CI: the install routes run on another minor's half (marker install)
def test_pip_install_editable_from_clone(clone: Path, tmp_path: Path) -> None:
    forget_jar(clone)
    python = fresh_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", clone])
    assert installed_jar(python) == clone / "python" / "sluice" / "jars" / f"sluice-spark-{running_minor()}.jar"


@pytest.mark.other_minor  # CI: the install routes run on another minor's half (marker install)
def test_spark_submit_packages_from_local_maven_repo(clone: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    minor = running_minor()
    other = next(m for m in MINORS if m != minor)
    run([clone / "dev" / "publish-maven", "--spark", minor, "--spark", other, repo])
    artifact = f"sluice-spark-{minor}_2.13"
    pom = (repo / "io" / "sluice" / artifact / VERSION / f"{artifact}-{VERSION}.pom").read_text()
    scopes = re.findall(r"<artifactId>([^<]+)</artifactId>\s*<version>[^<]+</version>\s*<scope>(\w+)</scope>", pom)
    assert ("kafka-clients", "provided") in scopes and ("scala-library", "provided") in scopes
    # nothing that --packages would fetch besides sluice: every dependency is provided or test-only
    assert {s for _, s in scopes} == {"provided", "test"}
    # (Spark's own modules are no dependency at all: the installation provides them; the Kafka
    # connector is provided, Spark's test-jars, where the build uses them, test-scoped)
    spark_deps = re.findall(r"<artifactId>(spark-[^<]+)</artifactId>\s*<version>[^<]+</version>\s*<scope>(\w+)</scope>", pom)
    assert ("spark-sql-kafka-0-10_2.13", "provided") in spark_deps
    assert all(scope == "test" for name, scope in spark_deps if name != "spark-sql-kafka-0-10_2.13"), spark_deps

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text("".join(json.dumps({"k": k}) + "\n" for k in "abacab"))
    # user.home elsewhere: Spark's resolver chain starts with ~/.m2, which may hold another build
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-Duser.home={tmp_path / 'home'}",
           "PYSPARK_PYTHON": sys.executable}
    def submit(artifact: str, check: bool = True) -> str:
        cmd = [Path(sys.prefix) / "bin" / "spark-submit", "--master", "local[2]",
               "--packages", f"io.sluice:{artifact}:{VERSION}", "--repositories", repo.as_uri(),
               "--conf", f"spark.jars.ivy={tmp_path / 'ivy'}",
               "--conf", "spark.plugins=sluice.plugin.SluicePlugin",
               "--conf", "spark.sql.extensions=sluice.plugin.SluiceExtensions",
               "--conf", "spark.sql.streaming.stateStore.providerClass=sluice.windowstore.InMemoryWindowStoreProvider",
               "--conf", "spark.sluice.cache.max.bytes.buffering=1m",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false",
               Path(__file__).resolve().parents[1] / "support" / "packages_child.py", src, tmp_path / "ckpt"]
        if check:
            return run(cmd, env=env)
        p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode != 0, p.stdout[-2000:]
        return p.stdout + p.stderr

    out = submit(artifact)
    # only sluice itself was fetched (its POM declares everything else provided), from the repo given
    assert re.findall(r"found (\S+) in (\S+)", out) == [(f"io.sluice#{artifact};{VERSION}", "repo-1")]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    assert result["counts"] == {"a": 3, "b": 2, "c": 1}
    assert "windowStoreSegments" in result["metrics"]  # the provider class came from the package
    # so did the plugin, which warned about the deprecated key in the driver log
    assert "WARN SluicePlugin: spark.sluice.cache.max.bytes.buffering is deprecated" in out
    # the artifact of another Spark minor refuses to start, naming both versions and the right jar
    wrong = submit(f"sluice-spark-{other}_2.13", check=False)
    assert f"This sluice jar is built for Spark {other}, but Spark {minor}." in wrong
    assert f"use sluice-spark-{minor}.jar" in wrong
