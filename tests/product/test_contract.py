"""sluice/conf.json is the one contract between the Scala and the Python side: every name both use
(keys, provider and class names, operator id ranges, the Connect type URL, the input bound's
option and metrics) is written there once; sluice.conf.SluiceConf and sluice._conf read it. These
tests need no Spark: they read the sources and the file."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import sluice
from sluice import _conf, _spark

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "jvm" / "src" / "main" / "resources" / "sluice" / "conf.json"
SOURCES = sorted([*(ROOT / "python" / "sluice").glob("*.py"), *(ROOT / "jvm" / "src" / "main").rglob("*.scala")])


def _spec() -> dict[str, Any]:
    return json.loads(CONF.read_text())


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k != "comment":
                yield from _strings(v)
    elif isinstance(node, str):
        yield node


def contract_names(spec: dict[str, Any]) -> set[str]:
    """The names conf.json holds for both sides, besides the keys (their full names are built from
    the prefix, so a copy of one would not be a literal of the file)."""
    c = spec["contract"]
    names = {spec["caching_provider"], *spec["providers"].values(), c["connect_type_url"], c["provider_class_key"],
             *c["classes"].values(), *_strings(c["input"]), *_strings(c["late_records"])}
    return names


def string_copies(text: str, names: set[str]) -> list[str]:
    """The names that `text` has inside a string literal (prose in comments and docs may name them)."""
    found = []
    for name in sorted(names):
        if re.search(r"""(["'])[^"'\n]*""" + re.escape(name) + r"""[^"'\n]*\1""", text):
            found.append(name)
    return found


def id_copies(text: str, ranges: dict[str, dict[str, int]]) -> list[str]:
    """Operator id ranges written out: both bounds of one on a line, or a first id assigned to a
    name that says id (a timeout of the same number is not one)."""
    found = []
    for kind, r in ranges.items():
        lo, hi = r["from"], r["until"]
        if re.search(rf"\b{lo}L?\b[^\n]*\b{hi}L?\b", text) or re.search(rf"\b\w*(?:[iI]d|ID)\w*\s*(?::\s*\w+\s*)?=\s*{lo}L?\b", text):
            found.append(kind)
    return found


def test_the_checks_find_a_copy() -> None:
    names = {"sluice.maxBytesPerTrigger"}
    assert string_copies('val SourceOption = "sluice.maxBytesPerTrigger"', names) == ["sluice.maxBytesPerTrigger"]
    assert string_copies("raise ValueError(f'bad option sluice.maxBytesPerTrigger: {v}')", names)
    assert string_copies("# the source option ``sluice.maxBytesPerTrigger`` bounds one source", names) == []
    ranges = {"suppress": {"from": 1000, "until": 2000}}
    assert id_copies("_SUPPRESS_IDS = range(1000, 2000)", ranges) == ["suppress"]
    assert id_copies("  val SuppressIdBase = 1000L", ranges) == ["suppress"]
    assert id_copies("datetime.fromtimestamp(ms / 1000, tz=timezone.utc)", ranges) == []
    assert id_copies("final class Sampler(timeoutMs: Long = 1000L)", ranges) == []
    assert id_copies("  val firstOperatorId: Long = 1000L", ranges) == ["suppress"]


def test_no_module_writes_a_name_of_the_contract_out_again() -> None:
    spec = _spec()
    names = contract_names(spec)
    assert len(names) >= 10
    copies = {str(p.relative_to(ROOT)): found for p in SOURCES
              if (found := string_copies(p.read_text(), names))}
    assert copies == {}, f"read these from conf.json (SluiceConf, sluice._conf) instead: {copies}"
    ranges = {k: v for k, v in spec["contract"]["operator_ids"].items() if k != "comment"}
    ids = {str(p.relative_to(ROOT)): found for p in SOURCES if (found := id_copies(p.read_text(), ranges))}
    assert ids == {}, f"operator id ranges are conf.json's contract.operator_ids: {ids}"


def test_both_sides_read_the_same_file() -> None:
    """The jar carries the file Scala reads at run time; Python reads it from the bundled jar."""
    spec = _spec()
    assert _spark.spec() == spec, "the bundled jar's conf.json is not this checkout's: run dev/build-jar"
    contract = spec["contract"]
    assert _conf.operator_ids("suppress") == range(1000, 2000)
    assert _conf.operator_ids("emit_cache") == range(2000, 3000)
    assert _conf.CONNECT_TYPE_URL == contract["connect_type_url"]
    assert sluice.PLUGIN_CLASS == contract["classes"]["plugin"]
    assert set(_conf.loading_settings().values()) == set(contract["classes"].values())
    assert _conf.PROVIDER_CLASS_KEY == contract["provider_class_key"]

    from sluice import input as sluice_input
    assert (sluice_input.MAX_BYTES_PER_TRIGGER, sluice_input.BYTES_METRIC, sluice_input.THROTTLED_METRIC) == (
        contract["input"]["source_option"], contract["input"]["bytes_metric"], contract["input"]["throttled_metric"])
