"""A newer sluice reads every file an older one wrote, and refuses one it cannot read.

tests/golden holds one small checkpoint per file format sluice writes (tests/support/golden_scenarios.py
says how each was written; tests/golden/generate.py wrote them). Each is copied, restarted with
this sluice and fed more input; what the query then emits must equal the counts computed here in
Python over all its input, the golden checkpoint's and the new: nothing lost, nothing counted twice.

A file of a format this sluice does not know (a newer one) or a truncated one fails at start or in
the first batch, in one line naming the file, the format found and the formats read, and the
checkpoint's state files are left as they were."""
from __future__ import annotations

import json
import re
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from support.golden_scenarios import BY_NAME, GOLDEN, PAIRS, SCENARIOS, Query, Scenario, copy_checkpoint, latest_set


def registry(spark: SparkSession) -> dict[str, tuple[int, list[int]]]:
    """Every kind of file sluice.state.FileFormats knows: (the format written, the formats read)."""
    formats = spark._jvm.sluice.state.FileFormats.all()  # type: ignore[union-attr]
    out = {}
    for i in range(formats.size()):
        f = formats.apply(i)
        reads = f.reads()
        out[f.kind()] = (f.current(), [reads.apply(j) for j in range(reads.size())])
    return out


def manifest(set_name: str, name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / set_name / name / "manifest.json").read_text())


# Formats of the files sluice 0.1.0 wrote: they carry no version (the window store's is its magic).
UNVERSIONED = 1


# Kafka record sizes: needs a Kafka broker to write; KafkaSizesSuite reads it in each format instead.
# Late record candidates: a batch's are removed before the batch (re)runs, so no sluice reads
# another's; LateCandidatesSuite reads and refuses them.
WITHOUT_GOLDEN = {"Kafka record sizes file", "late record candidates file"}


def test_every_format_this_sluice_writes_has_a_golden_checkpoint(spark: SparkSession) -> None:
    known = {kind: v for kind, v in registry(spark).items() if kind not in WITHOUT_GOLDEN}
    covered = {(kind, manifest(g, name)["formats"].get(kind, 2 if kind == "window store file" else UNVERSIONED))
               for g, name in PAIRS for kind in BY_NAME[name].formats}
    assert {(kind, current) for kind, (current, _) in known.items()} <= covered
    for kind, version in covered:
        assert version in known[kind][1], f"{kind} format {version} of a golden checkpoint is not read"


@pytest.mark.parametrize("set_name,name", PAIRS, ids=[f"{n}-{g}" for g, n in PAIRS])
def test_a_golden_checkpoint_restarts_with_nothing_lost_or_twice(spark: SparkSession, tmp_path: Path,
                                                                  set_name: str, name: str) -> None:
    scenario = BY_NAME[name]
    assert manifest(set_name, name)["input"] == scenario.input()  # the model below counts what it was fed
    q = Query(spark, scenario, copy_checkpoint(set_name, name, tmp_path / "ckpt"), tmp_path / "in")
    q.run(scenario.restart, scenario.more())
    assert q.table() == scenario.expected()
    if scenario.final:
        assert max(Counter(key for key, _ in q.rows).values()) == 1  # each final result once


# --- files this sluice must refuse -----------------------------------------------------------------

NEWER = re.escape("it was written by a newer sluice; run that release (or a later one) on this checkpoint")


def set_text_format(version: str) -> Callable[[SparkSession, Path], None]:
    """A text marker whose header says `version`, its content kept."""
    def mutate(_: SparkSession, f: Path) -> None:
        lines = f.read_text().splitlines(keepends=True)
        body = lines[1:] if lines and lines[0].startswith("sluice-format ") else lines
        f.write_text(f"sluice-format {version}\n" + "".join(body))
    return mutate


def set_wb_format(_: SparkSession, f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[4:8] = struct.pack(">i", 9)  # the int after the magic "SLWB"
    f.write_bytes(bytes(data))


def truncate(_: SparkSession, f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[:len(data) // 2])


def flip_byte(_: SparkSession, f: Path) -> None:
    """One bit of a row's bytes changed, the file's length kept: a count read from it would be wrong."""
    data = bytearray(f.read_bytes())
    data[len(data) - 12] ^= 0x01  # inside the last row, before the end mark and the checksum
    f.write_bytes(bytes(data))


def next_digit(_: SparkSession, f: Path) -> None:
    """The value's last digit one higher, the header and checksum line kept: in format 1 such a
    file read as another batch version."""
    lines = f.read_text().splitlines(keepends=True)
    value = lines[1].rstrip("\n")
    lines[1] = value[:-1] + str((int(value[-1]) + 1) % 10) + "\n"
    f.write_text("".join(lines))


def set_window_store_format(spark: SparkSession, f: Path) -> None:
    """The magic's last byte is the format: "SLW2" becomes "SLW3" (the file is LZ4 blocks, rewritten
    with the JVM's LZ4 codec as the store writes them)."""
    jvm = spark._jvm  # type: ignore[union-attr]
    lz4 = jvm.net.jpountz.lz4
    src = lz4.LZ4BlockInputStream(jvm.java.io.FileInputStream(str(f)))
    data = bytearray(src.readAllBytes())
    src.close()
    assert data[:3] == b"SLW" and data[3:4] == b"2"
    data[3] = ord("3")
    out = lz4.LZ4BlockOutputStream(jvm.java.io.FileOutputStream(str(f)), 256 * 1024)
    out.write(bytes(data))
    out.close()


def set_json(field: str) -> Callable[[SparkSession, Path], None]:
    def mutate(_: SparkSession, f: Path) -> None:
        doc = json.loads(f.read_text())
        doc[field] = 9
        f.write_text(json.dumps(doc))
    return mutate


# (scenario, the files changed, how, the message's pattern once the file's path is put first)
REFUSALS: dict[str, tuple[str, str, Callable[[SparkSession, Path], None], str]] = {
    "write-behind log of a newer format": (
        "record-cache-hdfs-write-behind", "state/0/*/_sluice_writebehind/*.wb", set_wb_format,
        f" is a sluice write-behind log of format 9, but this sluice reads formats 1, 2: {NEWER}"),
    "truncated write-behind log": (
        "record-cache-rocksdb-write-behind", "state/0/*/_sluice_writebehind/*.wb", truncate,
        r" is not a readable sluice write-behind log \(.*\): java.io.(EOFException|IOException: a row of)"),
    "write-behind log with a flipped bit": (
        "record-cache-hdfs-write-behind", "state/0/*/_sluice_writebehind/*.wb", flip_byte,
        r" is not a readable sluice write-behind log \(.*\): java.io.IOException: write-behind log damaged "
        r"\(checksum mismatch\)"),
    "record cache delegate marker of a newer format": (
        "record-cache-hdfs-write-behind", "state/0/*/_sluice_cache_delegate", set_text_format("9"),
        f" is a sluice record cache delegate marker of format 9, but this sluice reads formats 1, 2: {NEWER}"),
    "garbled record cache delegate marker": (
        "record-cache-rocksdb-write-behind", "state/0/*/_sluice_cache_delegate", set_text_format("x"),
        " is a sluice record cache delegate marker of format 'x', but this sluice reads formats 1, 2"),
    "window store file of a newer format": (
        "window-store", "state/0/*/*.wdelta", set_window_store_format,
        f" is a sluice window store file of format 3, but this sluice reads format 2: {NEWER}"),
    "truncated window store file": (
        "window-store", "state/0/*/*.wdelta", truncate, r": Stream ended prematurely"),
    "emission cache first version of a newer format": (
        "emission-cache", "state/*/_sluice_emit_cache_first_version", set_text_format("9"),
        f" is a sluice emission cache first version of format 9, but this sluice reads formats 1, 2: {NEWER}"),
    "emission cache first version changed": (
        "emission-cache", "state/*/_sluice_emit_cache_first_version", next_digit,
        r" is a damaged sluice emission cache first version \(checksum mismatch\): it was changed or cut after it "
        "was written"),
    "session plan record cut short": (
        "session-update", "state/*/_sluice_session_plan", truncate,
        r" is a damaged sluice session plan record \(no checksum line at its end\)"),
    "fused final results marker of a newer format": (
        "fused-final", "state/0/_sluice_fused_final", set_text_format("9"),
        f" is a sluice fused final results marker of format 9, but this sluice reads formats 1, 2: {NEWER}"),
    "session plan record of a newer format": (
        "session-update", "state/*/_sluice_session_plan", set_text_format("9"),
        f" is a sluice session plan record of format 9, but this sluice reads formats 1, 2: {NEWER}"),
    "operator settings file of a newer format": (
        "suppress-spill", "state/*/_sluice_operator.json", set_json("formatVersion"),
        f" is a sluice operator settings file of format 9, but this sluice reads format 1: {NEWER}"),
    "garbled operator settings file": (
        "suppress-spill", "state/*/_sluice_operator.json", truncate,
        r" is not a readable sluice operator settings file \(not JSON: .*\); the query runs again once it is "
        "removed or restored from a copy"),
    "suppress state rows of a newer layout": (
        "suppress-spill", "state/*/_sluice_operator.json", set_json("stateLayoutVersion"),
        r" \(stateLayoutVersion\) is a sluice suppress state row layout of format 9, but this sluice reads "
        f"format 1: {NEWER}"),
}


def state_files(ckpt: Path, sidecars: bool) -> dict[str, bytes]:
    """The state directory's files; without sidecars (`_sluice_operator.json`, which each query run
    rewrites for sluice.inspect) unless `sidecars`."""
    return {str(f.relative_to(ckpt)): f.read_bytes() for f in (ckpt / "state").rglob("*")
            if f.is_file() and (sidecars or "_sluice_operator.json" not in f.name)}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_file_this_sluice_cannot_read_fails_naming_it_and_is_left_as_it_was(spark: SparkSession,
                                                                             tmp_path: Path, case: str) -> None:
    name, pattern, mutate, message = REFUSALS[case]
    scenario: Scenario = BY_NAME[name]
    ckpt = copy_checkpoint(latest_set(name), name, tmp_path / "ckpt")
    changed = sorted(ckpt.glob(pattern))
    assert changed, pattern
    for f in changed:
        mutate(spark, f)
    sidecars = pattern.endswith("_sluice_operator.json")  # refused before it is rewritten
    before = state_files(ckpt, sidecars)
    q = Query(spark, scenario, ckpt, tmp_path / "in")
    with pytest.raises(Exception) as failure:
        q.run(scenario.runs[-1][0], scenario.more()[:1])  # the settings the checkpoint was written with
    paths = "|".join(re.escape(f"file:{f}") for f in changed)
    line = re.search(f"(?:{paths}){message}", str(failure.value))  # `message` is a pattern
    assert line, str(failure.value)
    assert "\n" not in line.group(0)
    assert q.rows == []  # nothing emitted from a misread state
    after = state_files(ckpt, sidecars)
    assert [f for f, b in before.items() if after.get(f) != b] == []
