"""ARCHITECTURE.md is the map a newcomer reads first: every sluice type it names in backticks is found
in a file of the same name, or the line naming it says which file holds it. (Names no sluice source
defines, Spark's and Kafka's types, are not sluice's to place.) Reads files only: no Spark needed."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
SOURCE_DIRS = [ROOT / "jvm" / "src", ROOT / "python" / "sluice"]

TYPE_NAME = re.compile(r"`([A-Z][A-Za-z0-9]*)`")
FILE_NAME = re.compile(r"`([\w./+-]+\.(?:scala|py|java))`")
DEFINITION = r"^\s*(?:(?:private|protected)(?:\[\w+\])?\s+|final\s+|sealed\s+|abstract\s+|case\s+|implicit\s+)*" \
    r"(?:class|object|trait|type|def)\s+{name}\b"


def _sources() -> list[Path]:
    return [p for d in SOURCE_DIRS for p in d.rglob("*") if p.suffix in (".scala", ".py", ".java")]


def _defines(path: Path, name: str) -> bool:
    return re.search(DEFINITION.format(name=re.escape(name)), path.read_text(), re.MULTILINE) is not None


def misplaced(doc: str, sources: list[Path]) -> list[str]:
    """The doc's type names that a sluice source defines, yet have neither a file of their name nor a
    file named on the same line that defines them."""
    by_stem: dict[str, list[Path]] = {}
    for p in sources:
        by_stem.setdefault(p.stem, []).append(p)
    defined_anywhere: dict[str, bool] = {}
    bad = []
    for n, line in enumerate(doc.splitlines(), 1):
        named_files = [p for f in FILE_NAME.findall(line) for p in sources if p.as_posix().endswith(f)]
        for name in TYPE_NAME.findall(line):
            if name in by_stem:
                continue
            if name not in defined_anywhere:
                defined_anywhere[name] = any(_defines(p, name) for p in sources)
            if not defined_anywhere[name]:
                continue
            if not any(_defines(p, name) for p in named_files):
                bad.append(f"ARCHITECTURE.md:{n}: `{name}`")
    return bad


def test_every_named_type_has_its_file_or_its_place_said() -> None:
    bad = misplaced(DOC.read_text(), _sources())
    assert not bad, "types ARCHITECTURE.md names with no file of their name and no file said on their line:\n" + \
        "\n".join(sorted(set(bad)))


def test_the_check_sees_a_misplaced_type_and_a_placed_one(tmp_path: Path) -> None:
    src = tmp_path / "Holder.scala"
    src.write_text("package x\n\nprivate[sluice] final case class Inner(a: Int)\nobject Holder\n")
    assert misplaced("the `Inner` row", [src]) == ["ARCHITECTURE.md:1: `Inner`"]
    assert misplaced("the `Inner` row, in `Holder.scala`", [src]) == []
    assert misplaced("the `Holder` and `StateStore` rows", [src]) == []
