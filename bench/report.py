"""bench/RESULTS.md and its plots from result files of bench/harness.py (bench/results/*.json).

    .venv/bin/python bench/report.py --run defaults=bench/results/peers-A.json \\
        --run experimental=bench/results/peers-B.json [--commit defaults=SHA] [--name experimental:sluice="..."]
    .venv/bin/python bench/report.py --check --run ...      # RESULTS.md is what the files give (exit 1 if not)

Every `--run LABEL=FILE` is one result file (a file without a label is labelled by its name). bench/peers
files are shown together: per query each side's drain throughput, the ratios of every sluice side to
every other engine's side, the targets met or missed, and the fixed-rate latencies where the files have
them. A side keeps its name in the first file it appears in; in a later file a side seen before is
named `SIDE (LABEL)` (so the `sluice` side of a file labelled `experimental` is "sluice (experimental)"),
or as `--name LABEL:SIDE=NAME` says. A ratio takes the other engine's side from the same file, or, when
that file has none (a file of sluice runs only), from the first file that has it, and says so. Other
benchmarks' files get a section each: settings, the median of every figure per side, the targets.

Each section of RESULTS.md sits between marker comments, so that a benchmark run again rewrites its own
section alone: `--update` keeps the file's other sections. `--section KEY=TITLE` puts the bench/peers
files in a section of their own (bench/peers' one-rewrite-at-a-time runs: `--section rewrites=...`),
whose plots are named after KEY; a run with `sluice+<flag>` sides also gets each rewrite's ratio to the
product defaults, within or beyond the run-to-run spread.

    .venv/bin/python bench/report.py --update --section "rewrites=bench/peers: each rewrite alone" \
        --run rewrites=bench/results/peers-C.json

Plots (PNG, matplotlib) go to bench/plots/ and are linked from RESULTS.md; `--no-plots` skips them.
RESULTS.md holds only what the files give (no time of writing), so `--check` can compare it.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from harness import spread  # bench/harness.py, beside this file

BENCH = Path(__file__).resolve().parent
SLUICE_SIDES = ("sluice", "sluice-exp", "sluice-rt")
# bench/peers' sides with one experimental rewrite on, `sluice+<flag>`, each against the `sluice` side.
ONE_REWRITE = "sluice+"
COMPARATORS = ("flink", "flink-sql", "kafka-streams", "ks-lowlat")
SIDE_ORDER = ("flink", "flink-sql", "kafka-streams", "ks-lowlat", "sluice", "sluice-exp", "sluice-rt")

QUERY_ORDER = ("count", "q5", "q7", "q8", "q11")
# The bound of every sluice / other-engine drain ratio (bench/peers/bench.py's targets).
RATIO_BOUND = 1.0


def is_sluice(side: str) -> bool:
    return side in SLUICE_SIDES or side.startswith(ONE_REWRITE)


class Run:
    """One result file and its label."""

    def __init__(self, label: str, path: Path, commit: str | None, spark: str | None = None) -> None:
        self.label, self.path = label, path
        self.data: dict[str, Any] = json.loads(path.read_text())
        self.bench: str = self.data.get("bench", "?")
        self.commit = commit or self.data.get("commit") or "not recorded in the result file"
        self.spark = spark or self.data.get("spark")
        self.names: dict[str, str] = {}  # side -> display name

    def settings(self) -> dict[str, Any]:
        return self.data.get("settings") or {}

    def spark_version(self) -> str:
        if self.spark:
            return str(self.spark)
        s = self.settings()
        if re.fullmatch(r"\d+\.\d+\.\d+\S*", str(s.get("spark", ""))):
            return str(s["spark"])
        m = re.search(r"Spark (\d+\.\d+\.\d+)", json.dumps(s))
        return m.group(1) if m else "not recorded"

    def machine(self) -> str:
        m = self.data.get("machine") or {}
        parts = [str(self.settings().get("machine") or f"{m.get('cpus', '?')} cores")]
        parts += [f"python {m['python']}"] if m.get("python") else []
        parts += [m["platform"]] if m.get("platform") else []
        parts += [f"core probe {m['core_probe_ms']} ms"] if m.get("core_probe_ms") else []
        return "; ".join(parts)


def split_key(key: str) -> tuple[str, str]:
    """A peers run name "q/side" as (query, side)."""
    q, _, side = key.partition("/")
    return q, side


def order_key(x: str, order: tuple[str, ...]) -> tuple[int, str]:
    return (order.index(x) if x in order else len(order), x)


def fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if v != v:  # NaN
            return "–"
        return f"{v:,.{digits}f}" if isinstance(v, float) or digits else f"{v:,}"
    return str(v)


def commit_cell(c: str) -> str:
    return c if " " in c else f"`{c}`"


def cell(v: Any) -> str:
    """A value for a table cell: no pipes, no newlines."""
    return fmt(v).replace("|", "\\|").replace("\n", " ")


def median(xs: list[Any]) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x]
    return statistics.median(xs) if xs else None


def name_sides(runs: list[Run], overrides: dict[tuple[str, str], str]) -> None:
    """Display names: a side keeps its name in the first file it is in, `SIDE (LABEL)` in a later one."""
    seen: set[str] = set()
    for r in runs:
        sides = {split_key(k)[1] for k in r.data.get("runs", {})} | \
                {split_key(k)[1] for k in r.data.get("latency", {})} | set(r.data.get("rate_search", {}))
        for side in sorted(sides, key=lambda s: order_key(s, SIDE_ORDER)):
            r.names[side] = overrides.get((r.label, side)) or (f"{side} ({r.label})" if side in seen else side)
        seen |= sides


def side_settings(r: Run, side: str) -> str:
    """One side's settings as the file has them: the structured ones (side_settings, and the spark.sluice.*
    keys the side's session was started with) or the described ones (older files)."""
    structured = (r.data.get("side_settings") or {}).get(side)
    started = [c for k, c in (r.data.get("side_config") or {}).items() if split_key(k)[1] == side and c]
    if structured:
        text = "; ".join(f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in structured.items())
        keys = {k: v for c in started for k, v in ((c.get("spark") or {}).get("spark.sluice.* keys set") or {}).items()}
        if started and is_sluice(side):
            text += f"; spark.sluice.* keys of its sessions: {json.dumps(keys) if keys else 'none'}"
        return text
    return str(r.settings().get(side, "not recorded"))


# ---------------------------------------------------------------- bench/peers


def peers_section(runs: list[Run], plots: Path | None, md_dir: Path, section: str = "peers",
                  title: str = "bench/peers: sluice against Flink and Kafka Streams") -> list[str]:
    out = [f"## {title}", ""]
    out += ["What is measured and how: [bench/peers/README.md](peers/README.md). Drain throughput = backlog "
            "events / (the last result's broker append time − the side's start call); every side in its own "
            "process with two cores' worth of parallelism, on the same broker, sides alternating.", ""]
    out += ["### The runs", "", "| label | file | started (UTC) | commit | Spark | machine | sides |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        out.append(f"| {r.label} | `{r.path.name}` | {cell(r.data.get('started', '?'))} | {commit_cell(r.commit)} | "
                   f"{cell(r.spark_version())} | {cell(r.machine())} | "
                   f"{cell(', '.join(f'{s} as “{n}”' if n != s else s for s, n in r.names.items()))} |")
    out.append("")
    for r in runs:
        s = r.settings()
        out += [f"#### Settings of run “{r.label}”", ""]
        if r.data.get("argv"):
            out += ["Command: `" + " ".join(str(x) for x in r.data["argv"]) + "`", ""]
        for side, name in r.names.items():
            out.append(f"- **{name}**: {side_settings(r, side)}")
        common = [k for k in s if k not in SIDE_ORDER and k != "machine"]
        for k in common:
            out.append(f"- {k}: {s[k]}")
        out.append("")

    # query -> display name -> (run, side, runs)
    table: dict[str, dict[str, tuple[Run, str, list[dict[str, Any]]]]] = {}
    for r in runs:
        for key, rs in (r.data.get("runs") or {}).items():
            q, side = split_key(key)
            table.setdefault(q, {})[r.names[side]] = (r, side, rs)
    queries = sorted(table, key=lambda q: order_key(q, QUERY_ORDER))
    summary = {q: ratios(table[q], runs) for q in queries}
    pairs = list(dict.fromkeys(p for q in queries for p in summary[q]))
    if pairs:
        out += ["### Summary: sluice / the other engines, drain throughput", "",
                f"Median drain events/s of each sluice side over each other engine's side, per query; target ≥ "
                f"{RATIO_BOUND}, met or missed. The other engine's side comes from the same run, or, marked \\*, "
                "from the first run that has it (a run of sluice sides only). † : a drain of either side had rows "
                "differing from the reference or ended incomplete (it did less or other work; see the query's "
                "table).", "",
                "| query | " + " | ".join(f"{n} / {c}" for n, c in pairs) + " |", "|---|" + "---|" * len(pairs)]
        out += [f"| {q} | " + " | ".join(ratio_cell(summary[q].get(p)) for p in pairs) + " |" for q in queries]
        met = sum(1 for q in queries for v in summary[q].values() if v[0] >= RATIO_BOUND)
        total = sum(len(summary[q]) for q in queries)
        out += ["", f"{met} of {total} met.", ""]
    out += rewrite_summary(table, queries)
    if queries:
        out += ["### Drain throughput", ""]
        if plots is not None:
            out += [f"![drain throughput per query and side]({rel(plots / f'{section}-throughput.png', md_dir)})", ""]
    for q in queries:
        sides = sorted(table[q], key=lambda n: (order_key(table[q][n][1], SIDE_ORDER), runs.index(table[q][n][0])))
        out += [f"#### {q}", "", "| side | run | drains | median events/s | min – max events/s | median warm events/s "
                "(second half) | median drain s | first result s | peak RSS MB | differing rows (per drain) | complete |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for n in sides:
            r, side, rs = table[q][n]
            eps = [x.get("events_per_s") or 0 for x in rs] or [0]
            out.append(f"| {n} | {r.label} | {len(rs)} | {fmt(median(eps))} | {fmt(min(eps))} – {fmt(max(eps))} | "
                       f"{fmt(median([x.get('warm_events_per_s') for x in rs]))} | "
                       f"{fmt(median([x.get('drain_s') for x in rs]), 2)} | "
                       f"{fmt(median([x.get('first_result_s') for x in rs]), 2)} | "
                       f"{fmt(max((x.get('peak_rss_mb') or 0) for x in rs))} | "
                       f"{', '.join(fmt(x.get('differing_from_expected')) for x in rs)} | "
                       f"{'yes' if all(x.get('complete') for x in rs) else 'no'} |")
        out.append("")
        out += ratio_table(q, table[q], runs)
    out += targets(runs)
    out += latency_section(runs, plots, md_dir, section)
    return out


def rewrite_summary(table: dict[str, dict[str, tuple[Run, str, list[dict[str, Any]]]]],
                    queries: list[str]) -> list[str]:
    """Each one-rewrite side's median drain throughput over the `sluice` side's of the same run, per query,
    and whether the gain is beyond the spread: the larger relative range (max - min) / median of the two
    sides' drains (bench/peers/bench.py prints the same as a target)."""
    cells: dict[str, dict[str, str]] = {}
    for q in queries:
        for n, (r, side, rs) in table[q].items():
            base = [m for m, (r2, s2, _) in table[q].items() if r2 is r and s2 == "sluice"]
            if not side.startswith(ONE_REWRITE) or not base:
                continue
            mine = [x.get("events_per_s") or 0 for x in rs]
            theirs = [x.get("events_per_s") or 0 for x in table[q][base[0]][2]]
            if not min(mine) or not min(theirs):
                continue
            ratio = statistics.median(mine) / statistics.median(theirs)
            sp = spread(mine, theirs)
            verdict = "beyond" if ratio >= 1 + sp else "within"
            cells.setdefault(n, {})[q] = f"{ratio:.3f} (spread {sp:.3f}: {verdict})"
    if not cells:
        return []
    out = ["### Summary: each rewrite alone / the product defaults, drain throughput", "",
           "Median drain events/s of the side with one experimental rewrite on over the side at sluice's product "
           "defaults, in the same run, on the queries the rewrite changes; the spread is the larger relative "
           "range (max − min) / median of the two sides' drains, and a gain counts only beyond it.", "",
           "| side | " + " | ".join(queries) + " |", "|---|" + "---|" * len(queries)]
    out += [f"| {n} | " + " | ".join(cells[n].get(q, "–") for q in queries) + " |" for n in cells]
    return out + [""]


def ratios(sides: dict[str, tuple[Run, str, list[dict[str, Any]]]], runs: list[Run]) \
        -> dict[tuple[str, str], tuple[float, bool, bool]]:
    """(sluice side, other engine's side) -> (median drain throughput ratio, whether the other side came
    from another run, whether a run of either lost or changed rows or ended incomplete) for every
    micro-batch sluice side of a query: the other engine's side from the same run, else from the first
    run that has it."""
    mine = [n for n in sides if is_sluice(sides[n][1]) and sides[n][1] != "sluice-rt"]
    theirs: dict[str, list[str]] = {}
    for n, (_, side, _) in sides.items():
        if side in COMPARATORS:
            theirs.setdefault(side, []).append(n)
    out = {}
    for n in mine:
        r, _, rs = sides[n]
        med = median([x.get("events_per_s") for x in rs])
        for c in sorted(theirs, key=lambda s: order_key(s, COMPARATORS)):
            same = [m for m in theirs[c] if sides[m][0] is r]
            pick = same[0] if same else sorted(theirs[c], key=lambda m: runs.index(sides[m][0]))[0]
            other = median([x.get("events_per_s") for x in sides[pick][2]])
            bad = any(x.get("differing_from_expected") or not x.get("complete") for x in rs + sides[pick][2])
            if med and other:
                out[(n, c)] = (med / other, not same, bad)
    return out


def ratio_cell(v: tuple[float, bool, bool] | None) -> str:
    if v is None:
        return "–"
    return (f"{v[0]:.3f}{'*' if v[1] else ''}{' †' if v[2] else ''} "
            f"({'met' if v[0] >= RATIO_BOUND else '**missed**'})")


def ratio_table(q: str, sides: dict[str, tuple[Run, str, list[dict[str, Any]]]], runs: list[Run]) -> list[str]:
    """Every sluice side's median drain throughput over every other engine's side's, met or missed
    against RATIO_BOUND."""
    rs = ratios(sides, runs)
    if not rs:
        return []
    mine = list(dict.fromkeys(n for n, _ in rs))
    comp = list(dict.fromkeys(c for _, c in rs))
    out = [f"Median drain throughput of each sluice side over each other engine's (target ≥ {RATIO_BOUND}; "
           "\\* other run, † differing rows or incomplete):", "",
           "| sluice side | " + " | ".join(f"/ {c}" for c in comp) + " |", "|---|" + "---|" * len(comp)]
    out += [f"| {n} | " + " | ".join(ratio_cell(rs.get((n, c))) for c in comp) + " |" for n in mine]
    out.append("")
    return out


def targets(runs: list[Run]) -> list[str]:
    out = []
    for r in runs:
        ts = r.data.get("targets") or []
        if not ts:
            continue
        out += [f"### Targets of run “{r.label}” (as the run printed them)", "",
                "| target | value | bound | met |", "|---|---|---|---|"]
        for t in ts:
            name = str(t.get("name", ""))
            for side, n in r.names.items():
                if n != side:  # the side's display name inside "q: side / other" and "q/side"
                    name = re.sub(rf"(?<![\w-]){re.escape(side)}(?![\w-])", n, name)
            out.append(f"| {cell(name)} | {fmt(float(t.get('value', float('nan'))), 3)} | {t.get('op')} {t.get('bound')} | "
                       f"{'met' if t.get('met') else '**missed**'} |")
        out.append("")
    return out


def latency_points(runs: list[Run]) -> dict[str, dict[str, list[tuple[str, dict[str, Any]]]]]:
    """query -> display name -> [(kind, fixed-rate result)] from the fixed-rate runs and rate searches."""
    pts: dict[str, dict[str, list[tuple[str, dict[str, Any]]]]] = {}
    for r in runs:
        for key, rs in (r.data.get("latency") or {}).items():
            q, side = split_key(key)
            for x in rs:
                pts.setdefault(q, {}).setdefault(r.names[side], []).append(("fixed rate", x))
        for side, s in (r.data.get("rate_search") or {}).items():
            for x in s.get("tries") or []:
                pts.setdefault("count", {}).setdefault(r.names[side], []).append(("rate search", x))
    return pts


def latency_section(runs: list[Run], plots: Path | None, md_dir: Path, section: str = "peers") -> list[str]:
    pts = latency_points(runs)
    if not pts:
        return ["### Latency", "", "These runs have no fixed-rate runs (`--rate 0`) and no rate search.", ""]
    out = ["### Latency at a fixed rate", "",
           "Latency of a final result = its broker append time − the instant its window closed (the count: the "
           "send of the record that closed it; `from ack`: that send's acknowledgement). The first window, the "
           "warm-up, is not in the percentiles.", ""]
    for q in sorted(pts, key=lambda q: order_key(q, QUERY_ORDER)):
        out += [f"#### {q}", ""]
        if plots is not None:
            out += [f"![latency percentiles per rate, {q}]({rel(plots / f'{section}-latency-{q}.png', md_dir)})", ""]
        out += ["| side | kind | rate /s | achieved /s | p50 ms | p99 ms | max ms | from ack p50 / p99 ms | results timed "
                "| differing | complete |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for n in sorted(pts[q]):
            for kind, x in sorted(pts[q][n], key=lambda p: (p[0], p[1].get("rate", 0))):
                out.append(f"| {n} | {kind} | {fmt(x.get('rate'))} | {fmt(x.get('achieved_rate'))} | "
                           f"{fmt(x.get('p50_ms'))} | {fmt(x.get('p99_ms'))} | {fmt(x.get('max_ms'))} | "
                           f"{fmt(x.get('from_ack_p50_ms'))} / {fmt(x.get('from_ack_p99_ms'))} | "
                           f"{fmt(x.get('results_timed'))} | {fmt(x.get('differing_from_expected'))} | "
                           f"{fmt(x.get('complete'))} |")
        out.append("")
    searches = [(r, side, s) for r in runs for side, s in (r.data.get("rate_search") or {}).items()]
    if searches:
        out += ["#### Rate search (the count)", "", "| side | highest rate held /s | stopped because |", "|---|---|---|"]
        for r, side, s in searches:
            out.append(f"| {r.names[side]} | {fmt(s.get('held_rate'))} | {cell(s.get('stopped_because'))} |")
        out.append("")
    return out


def peers_plots(runs: list[Run], plots: Path, section: str = "peers") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table: dict[str, dict[str, tuple[str, list[float]]]] = {}
    for r in runs:
        for key, rs in (r.data.get("runs") or {}).items():
            q, side = split_key(key)
            table.setdefault(q, {})[r.names[side]] = (side, [x.get("events_per_s") or 0 for x in rs])
    plots.mkdir(parents=True, exist_ok=True)
    if table:
        queries = sorted(table, key=lambda q: order_key(q, QUERY_ORDER))
        names = sorted({n for q in table for n in table[q]},
                       key=lambda n: order_key(next(table[q][n][0] for q in table if n in table[q]), SIDE_ORDER) + (n,))
        width = 0.8 / max(1, len(names))
        fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(queries) + 2), 4.2))
        for i, n in enumerate(names):
            xs = [j + (i - (len(names) - 1) / 2) * width for j, q in enumerate(queries) if n in table[q]]
            ys = [statistics.median(table[q][n][1]) for q in queries if n in table[q]]
            ax.bar(xs, ys, width, label=n)
            for x, q in zip(xs, [q for q in queries if n in table[q]]):
                ax.plot([x] * len(table[q][n][1]), table[q][n][1], "k.", markersize=3)
        ax.set_xticks(range(len(queries)), queries)
        ax.set_ylabel("drain events/s (bar: median; dots: runs)")
        ax.set_title(f"bench/peers ({section}): drain throughput per query and side")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(plots / f"{section}-throughput.png", dpi=110)
        plt.close(fig)
    for q, sides in latency_points(runs).items():
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for n, ps in sorted(sides.items()):
            ps = sorted((p[1] for p in ps if p[1].get("p50_ms") is not None), key=lambda x: x.get("rate", 0))
            if not ps:
                continue
            rates = [x["rate"] for x in ps]
            line, = ax.plot(rates, [x["p50_ms"] for x in ps], "o-", label=f"{n} p50")
            ax.plot(rates, [x.get("p99_ms") for x in ps], "s--", color=line.get_color(), label=f"{n} p99")
        ax.set_xlabel("rate (events/s)")
        ax.set_ylabel("latency ms")
        ax.set_yscale("log")
        ax.set_title(f"bench/peers {q}: latency percentiles per rate")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(plots / f"{section}-latency-{q}.png", dpi=110)
        plt.close(fig)


# ---------------------------------------------------------------- other benchmarks


def generic_section(r: Run) -> list[str]:
    out = [f"## bench {r.bench} (run “{r.label}”)", "", r.data.get("description", ""), "",
           f"- file: `{r.path.name}`; started {r.data.get('started', '?')}; commit {commit_cell(r.commit)}; "
           f"Spark {r.spark_version()}; machine {r.machine()}"]
    for k, v in r.settings().items():
        out.append(f"- {k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}")
    out.append("")
    runs = r.data.get("runs") or {}
    if runs:
        keys = sorted({k for rs in runs.values() for x in rs for k, v in x.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)})
        out += ["Median per side over its runs:", "", "| side | runs | " + " | ".join(keys) + " |",
                "|---|---|" + "---|" * len(keys)]
        for side, rs in runs.items():
            out.append(f"| {side} | {len(rs)} | " + " | ".join(fmt(median([x.get(k) for x in rs]), 3 if any(
                isinstance(x.get(k), float) for x in rs) else 0) for k in keys) + " |")
        out.append("")
    out += targets([r]) if r.data.get("targets") else []
    return out


# ---------------------------------------------------------------- main


def rel(p: Path, md_dir: Path) -> str:
    try:
        return str(p.resolve().relative_to(md_dir.resolve()))
    except ValueError:
        return str(p.resolve())


HEADER = ["# Benchmark results", "",
          "Written by `bench/report.py` from the result files named below (`bench/results/*.json`, not "
          "committed); how each benchmark measures is in its README (`bench/*/README.md`). Every figure here "
          "is from the machine its run names: compare ratios, not rates, across machines. Each section comes "
          "from its own runs and is rewritten when they are run again.", ""]


def marks(key: str) -> tuple[str, str]:
    """The lines around a section in RESULTS.md, so that one section can be rewritten alone (--update)."""
    return f"<!-- section {key} -->", f"<!-- end of section {key} -->"


def sections(runs: list[Run], plots: Path | None, md: Path, key: str, title: str) -> dict[str, str]:
    """Section key -> its text: the bench/peers files together under `key`, every other file on its own."""
    out: dict[str, list[str]] = {}
    peers = [r for r in runs if r.bench == "peers"]
    if peers:
        out[key] = peers_section(peers, plots, md.parent, key, title)
    for r in runs:
        if r.bench != "peers":
            out[r.bench if r.bench not in out else f"{r.bench}-{r.label}"] = generic_section(r)
    return {k: "\n".join([marks(k)[0], *v]).rstrip() + "\n" + marks(k)[1] + "\n" for k, v in out.items()}


def render(parts: dict[str, str], existing: str | None) -> str:
    """The whole file: the given sections, or with `existing` (--update) that file with the given sections
    put in place of their earlier text and the other sections kept."""
    if existing is None:
        return "\n".join(HEADER) + "\n" + "\n".join(parts.values())
    text = existing
    for k, part in parts.items():
        begin, end = marks(k)
        i, j = text.find(begin), text.find(end)
        if i >= 0 and j > i:
            text = text[:i] + part + text[j + len(end) + 1:]
        else:
            text = text.rstrip() + "\n\n" + part
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", default=[], metavar="LABEL=FILE",
                    help="a result file and its label (repeatable; default: the newest bench/results/peers-*.json)")
    ap.add_argument("--name", action="append", default=[], metavar="LABEL:SIDE=NAME",
                    help="the display name of SIDE in the run LABEL (repeatable)")
    ap.add_argument("--commit", action="append", default=[], metavar="LABEL=SHA",
                    help="the commit a run was made at, for result files that do not record it")
    ap.add_argument("--spark", action="append", default=[], metavar="LABEL=VERSION",
                    help="the Spark a run was made with, for result files that do not record it")
    ap.add_argument("--out", default=str(BENCH / "RESULTS.md"))
    ap.add_argument("--plots", default=str(BENCH / "plots"))
    ap.add_argument("--no-plots", action="store_true", help="no PNGs, and no links to them")
    ap.add_argument("--section", default="peers", metavar="KEY[=TITLE]",
                    help="the section the bench/peers files go to, and its heading (plots are named after KEY)")
    ap.add_argument("--update", action="store_true",
                    help="rewrite only the sections these files give; keep the other sections of --out")
    ap.add_argument("--check", action="store_true",
                    help="write nothing: exit 1 unless --out is what the files give (and its plots exist)")
    a = ap.parse_args()

    if not a.run:
        found = sorted((BENCH / "results").glob("peers-*.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            ap.error("no --run given and no bench/results/peers-*.json")
    specs = a.run or [str(found[-1])]
    commits = dict(c.split("=", 1) for c in a.commit)
    sparks = dict(c.split("=", 1) for c in a.spark)
    runs = []
    for spec in specs:
        label, _, file = spec.rpartition("=") if "=" in spec else ("", "", spec)
        path = Path(file)
        runs.append(Run(label or path.stem, path, commits.get(label or path.stem), sparks.get(label or path.stem)))
    overrides = {}
    for n in a.name:
        left, _, name = n.partition("=")
        label, _, side = left.partition(":")
        overrides[(label, side)] = name
    name_sides(runs, overrides)

    md = Path(a.out)
    plots = None if a.no_plots else Path(a.plots)
    key, _, title = a.section.partition("=")
    parts = sections(runs, plots, md, key, title or ("bench/peers: sluice against Flink and Kafka Streams"
                                                      if key == "peers" else f"bench/peers: {key}"))
    text = render(parts, md.read_text() if a.update and md.exists() else None)
    if a.check:
        problems = []
        if not md.exists() or md.read_text() != text:
            problems.append(f"{md} is not what the result files give (run without --check to rewrite it)")
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
            if not (md.parent / link).exists():
                problems.append(f"plot missing: {link}")
        print("\n".join(problems) or f"{md}: matches {', '.join(str(r.path) for r in runs)}")
        sys.exit(1 if problems else 0)
    if plots is not None:
        if any(r.bench == "peers" for r in runs):
            peers_plots([r for r in runs if r.bench == "peers"], plots, key)
    md.write_text(text)
    print(f"wrote {md}" + (f" and plots under {plots}" if plots is not None else ""))


if __name__ == "__main__":
    main()
