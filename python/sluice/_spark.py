"""Which Spark is running, and which of the bundled sluice jars serves it.

sluice's JVM side calls Spark internals that change between minor versions, so the package carries
one jar per supported Spark minor (``jars/sluice-spark-<minor>.jar``), each compiled against that
minor. The list of supported minors and the messages are in ``sluice/conf.json`` (its ``spark``
section), the file the build and the Scala side read too.
"""

from __future__ import annotations

import json
import re
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from sluice import _handles
from sluice._errors import SluiceUnsupportedSparkError

JARS_DIR = Path(__file__).resolve().parent / "jars"
_JAR_PATTERN = re.compile(r"^sluice-spark-(\d+\.\d+)\.jar$")


def bundled_jars() -> dict[str, Path]:
    """The jars in this package, by the Spark minor each is built for."""
    found = {}
    if JARS_DIR.is_dir():
        for jar in JARS_DIR.iterdir():
            m = _JAR_PATTERN.match(jar.name)
            if m and jar.is_file():
                found[m.group(1)] = jar
    return found


@lru_cache(maxsize=1)
def spec() -> dict[str, Any]:
    """sluice/conf.json, from any bundled jar (every jar carries the same file)."""
    jars = bundled_jars()
    if not jars:
        raise FileNotFoundError(
            f"no sluice jar in {JARS_DIR}: install sluice with pip (it builds the jars) or run dev/build-jar"
        )
    with zipfile.ZipFile(sorted(jars.values())[-1]) as jar:
        spec: dict[str, Any] = json.loads(jar.read("sluice/conf.json"))
        return spec


def supported() -> list[str]:
    """The supported Spark minors, oldest first."""
    return list(spec()["spark"]["supported"])


def minor_of(version: str) -> str:
    """``"4.3"`` of ``"4.3.0"`` (or of ``"4.3"``, ``"4.3.0.dev1"``)."""
    parts = re.split(r"[.\-+]", str(version).strip())
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise SluiceUnsupportedSparkError(_text("unsupported", found=version))
    return f"{parts[0]}.{parts[1]}"


def jar_for(version: str | None = None) -> Path:
    """The bundled jar for Spark ``version`` (default: the installed pyspark's)."""
    found = version if version is not None else _handles.pyspark_version()
    minor = minor_of(found)
    if minor not in supported():
        raise SluiceUnsupportedSparkError(_text("unsupported", found=found))
    jar = bundled_jars().get(minor)
    if jar is None:
        raise FileNotFoundError(
            f"{JARS_DIR / spec()['spark']['jar'].replace('{minor}', minor)} is missing: install sluice with pip "
            f"(it builds a jar per supported Spark) or run dev/build-jar {minor}"
        )
    return jar


def _text(name: str, **args: str) -> str:
    section = spec()["spark"]
    values = {"supported": ", ".join(section["supported"]), **args}
    text = section[name]
    for k, v in values.items():
        text = text.replace("{" + k + "}", str(v))
    return str(text)
