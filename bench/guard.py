"""The speed guard (`make bench`): the pipeline, start-up, idle-memory and Telegram figures beside bench/baseline.json.

Run with `make bench` or `.venv/bin/python bench/guard.py` (under a minute). It measures, each as its own benchmark
does: bench/pipeline.py's two runs (300 messages from 1 session, 3,000 from 1,000 sessions; messages/s, p50 and p99
in ms), a real `bot run` on the fake Telegram (bench/telegram.py: start → first getUpdates and the idle RSS one second
later, the median of three starts) and its batches of 200 DMs from 20 users and of 1,000 DMs from 100 users with the
limiter off (replies/s and the bot's CPU ms per DM: the short batch weighs each person's first message more). Each
figure is printed beside the committed baseline with the ratio now/baseline, and marked where it is more than 15 %
worse in its direction (lower messages/s; higher latency, start-up, RSS or CPU). A benchmark is not a test: the exit
status is 0 whatever the figures, unless a benchmark crashed.

This machine's speed wanders by a fifth for minutes at a time, so the guard also times a fixed pure-Python workload
(`reference`, before, between and after the benchmarks): the first figure, the machine's own. A figure that scales
with the machine (all but the RSS) is also given its ratio allowing for it (the rates multiplied, the times divided by
the reference's ratio), and a figure marked worse that is within 15 % once allowed for says "(the machine)".

`--runs N` runs everything N times and takes each figure's median (about 22 s a run): on a machine whose speed
wanders, a baseline is best saved from three. `--save` writes the figures as the new baseline (with the date, the
commit, the machine and the number of runs); `--readme` rewrites the figures table in README.md's "## Performance"
section, between its bench:guard markers, from the same figures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != ROOT / "bench"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BASELINE = ROOT / "bench" / "baseline.json"
README = ROOT / "README.md"
THRESHOLD = 0.15  # more than this share worse than the baseline, in the figure's direction, is marked
WORSE_MARK = "WORSE >15%"
MACHINE_MARK = "WORSE >15% (the machine)"  # but within 15 % once the machine's speed is allowed for
BETTER_MARK = "better >15%"
START_MARKER = "<!-- bench:guard:start -->"
END_MARKER = "<!-- bench:guard:end -->"
# The two workloads of the speed targets: (DMs, users, the key of its replies/s, the key of its CPU ms per DM).
TELEGRAM_BATCHES = (
    (200, 20, "telegram_rate", "cpu_ms_per_dm"),
    (1_000, 100, "telegram_1000_rate", "cpu_ms_per_dm_1000"),
)
STARTS = 3  # start-up and idle RSS: the median of this many `bot run` starts (the batches' own, then more)
REFERENCES = 5  # times the machine's reference workload runs before, between and after the benchmarks


FigureKind = Literal["speed", "size", "machine"]  # moves with the machine's speed; does not; is the machine's own


@dataclass(frozen=True)
class Figure:
    """A figure the guard keeps: its key in baseline.json, what it is, its unit, which way is better, its decimals,
    and its kind."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    decimals: int
    kind: FigureKind = "speed"

    def format(self, value: float | None) -> str:
        return "-" if value is None else f"{value:,.{self.decimals}f}"


MACHINE = Figure("machine_ms", "the machine: a fixed pure-Python workload (`reference`)", "ms", False, 1, "machine")
FIGURES = (
    MACHINE,
    Figure("pipeline_1_rate", "pipeline, 1 session, 300 messages: throughput", "msg/s", True, 0),
    Figure("pipeline_1_p50_ms", "pipeline, 1 session: latency p50", "ms", False, 2),
    Figure("pipeline_1_p99_ms", "pipeline, 1 session: latency p99", "ms", False, 2),
    Figure("pipeline_1000_rate", "pipeline, 1,000 sessions, 3,000 messages: throughput", "msg/s", True, 0),
    Figure("pipeline_1000_p50_ms", "pipeline, 1,000 sessions: latency p50 from the batch's start", "ms", False, 1),
    Figure("pipeline_1000_p99_ms", "pipeline, 1,000 sessions: latency p99 from the batch's start", "ms", False, 1),
    Figure("startup_s", "start-up: `bot run` → first getUpdates", "s", False, 2),
    Figure("idle_rss_mib", "idle RSS, 1 s after the first getUpdates", "MiB", False, 1, "size"),
    Figure("telegram_rate", "Telegram, 200 DMs from 20 users, limiter off: throughput", "msg/s", True, 1),
    Figure("cpu_ms_per_dm", "Telegram: the bot's CPU per DM (user + system)", "ms", False, 2),
    Figure("telegram_1000_rate", "Telegram, 1,000 DMs from 100 users, limiter off: throughput", "msg/s", True, 1),
    Figure("cpu_ms_per_dm_1000", "Telegram, 1,000 DMs: the bot's CPU per DM", "ms", False, 2),
)


@dataclass(frozen=True)
class Comparison:
    """One figure now beside its baseline (None: the baseline has no value for it), and how much slower the machine
    ran than at the baseline (the reference's time now / then; None: not known)."""

    figure: Figure
    now: float
    baseline: float | None
    machine: float | None = None

    @property
    def ratio(self) -> float | None:
        """now / baseline; None without a usable baseline or figure."""
        if self.baseline is None or not (math.isfinite(self.now) and math.isfinite(self.baseline)):
            return None
        if self.baseline == 0:
            return None
        return self.now / self.baseline

    @property
    def allowing(self) -> float | None:
        """The ratio as if the machine had run at the baseline's speed; None for the machine's own figure, or when
        the ratio or the machine's is not known."""
        ratio, kind = self.ratio, self.figure.kind
        if ratio is None or kind == "machine":
            return None
        if kind == "size":
            return ratio
        if self.machine is None or not math.isfinite(self.machine) or self.machine <= 0:
            return None
        return ratio * self.machine if self.figure.higher_is_better else ratio / self.machine

    @property
    def worse(self) -> float | None:
        """How much worse than the baseline, as a share of it, in the figure's direction (negative: better)."""
        return _worse(self.ratio, self.figure.higher_is_better)

    @property
    def mark(self) -> str:
        worse = self.worse
        if worse is None:
            return "no baseline" if self.baseline is None else "n/a"
        if self.figure.kind == "machine":
            return ""  # not the code's
        if worse > THRESHOLD:
            allowed = _worse(self.allowing, self.figure.higher_is_better)
            return MACHINE_MARK if allowed is not None and allowed <= THRESHOLD else WORSE_MARK
        if worse < -THRESHOLD:
            return BETTER_MARK
        return ""


def _worse(ratio: float | None, higher_is_better: bool) -> float | None:
    if ratio is None:
        return None
    return round(1 - ratio if higher_is_better else ratio - 1, 9)  # so that exactly 15 % is not over


def compare(figures: dict[str, float], baseline: dict[str, Any] | None) -> list[Comparison]:
    """Every figure of the run, in FIGURES' order, beside the value in `baseline` (a baseline.json record), if any,
    with the machine's speed then and now when both have it."""
    values = (baseline or {}).get("figures", {})
    machine = Comparison(MACHINE, figures.get(MACHINE.key, math.nan), values.get(MACHINE.key)).ratio
    return [
        Comparison(figure, figures[figure.key], values.get(figure.key), machine)
        for figure in FIGURES
        if figure.key in figures
    ]


def table(comparisons: list[Comparison]) -> str:
    """The printed table: figure, unit, now, baseline, now/baseline, that ratio allowing for the machine, the mark."""
    width = max(len(item.figure.label) for item in comparisons)
    lines = [f"{'figure':<{width}} {'unit':<5} {'now':>9} {'baseline':>9} {'now/base':>8} {'allowing':>8}  mark"]
    for item in comparisons:
        figure = item.figure
        ratio, allowing = ("-" if value is None else f"{value:.2f}" for value in (item.ratio, item.allowing))
        lines.append(
            f"{figure.label:<{width}} {figure.unit:<5} {figure.format(item.now):>9} {figure.format(item.baseline):>9}"
            f" {ratio:>8} {allowing:>8}  {item.mark}".rstrip()
        )
    return "\n".join(lines)


def summary(comparisons: list[Comparison], baseline: dict[str, Any] | None) -> str:
    """How many figures are more than 15 % worse (and which), against which baseline; and, when the machine ran at
    another speed, how many are once that is allowed for."""
    if baseline is None:
        return f"guard: no baseline to compare with ({len(comparisons)} figures; `--save` records one)"
    source = f"the baseline of {baseline.get('date', '?')} (commit {baseline.get('commit', '?')})"
    worse = [item for item in comparisons if item.mark in (WORSE_MARK, MACHINE_MARK)]
    better = sum(item.mark == BETTER_MARK for item in comparisons)
    missing = sum(item.ratio is None for item in comparisons)
    extra = "".join(
        [f", {better} more than 15 % better" if better else "", f", {missing} without a comparison" if missing else ""]
    )
    if not worse:
        return f"guard: no figure more than 15 % worse than {source}; {len(comparisons)} figures{extra}"
    line = f"guard: {len(worse)} of {len(comparisons)} figures more than 15 % worse than {source}{extra}: "
    line += "; ".join(item.figure.label for item in worse)
    machine = next((item.ratio for item in comparisons if item.figure.kind == "machine"), None)
    if machine is None:
        return line
    still = [item.figure.label for item in worse if item.mark == WORSE_MARK]
    line += f"\nthe machine took {machine:.2f} times the baseline's time for its reference workload; allowing for it, "
    return line + (f"{len(still)} still are: {'; '.join(still)}" if still else "none is")


def reference() -> float:
    """Milliseconds for a fixed pure-Python workload (dicts, strings, JSON, a sort: about 70 ms on the development
    machine), the measure of the machine's own speed."""
    started = time.perf_counter()
    table: dict[str, dict[str, Any]] = {}
    for n in range(20_000):
        key = f"chat:{n % 500}:{n}"
        table[key] = {"id": n, "text": key.upper(), "parts": key.split(":")}
        json.dumps(table[key])
        if n % 7 == 0:
            del table[key]
    sorted(table, key=lambda name: table[name]["id"] % 97)
    return (time.perf_counter() - started) * 1000


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {"cores": os.cpu_count(), "python": platform.python_version()}


def commit() -> str:
    """The short hash of HEAD (read only), or "unknown" outside a git checkout."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() or "unknown"


def record(figures: dict[str, float], *, date: str, revision: str, on: dict[str, Any], runs: int = 1) -> dict[str, Any]:
    """The baseline.json record of a run: its figures (in FIGURES' order), date, commit, machine and number of runs
    the figures are the median of."""
    known = [figure.key for figure in FIGURES if figure.key in figures]
    ordered = {key: round(figures[key], 4) for key in known}
    return {"date": date, "commit": revision, "machine": on, "runs": runs, "figures": ordered}


def median_figures(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over `runs` (the figures the first run has)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def write_baseline(path: Path, baseline: dict[str, Any]) -> None:
    path.write_text(json.dumps(baseline, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_baseline(path: Path) -> dict[str, Any] | None:
    """The baseline record, or None when there is none yet."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


def readme_block(figures: dict[str, float], baseline: dict[str, Any]) -> str:
    """The README's figures table from a run (`baseline` is its record: the date, commit and machine)."""
    lines = ["| figure | value | better |", "|---|---:|---|"]
    for figure in FIGURES:
        if figure.key in figures:
            better = "higher" if figure.higher_is_better else "lower"
            lines.append(f"| {figure.label} | {figure.format(figures[figure.key])} {figure.unit} | {better} |")
    on = baseline["machine"]
    lines += [
        "",
        f"Measured {baseline['date']} by `bench/guard.py --readme` (commit {baseline['commit']}; {on['cores']} cores,"
        f" Python {on['python']}):\n{_runs_text(baseline.get('runs', 1))}; start-up and idle RSS in each run are the"
        f" median of {STARTS} starts.",
    ]
    return "\n".join(lines)


def _runs_text(runs: int) -> str:
    return "one run" if runs == 1 else f"each figure the median of {runs} runs"


def rewrite_readme(text: str, block: str) -> str:
    """`text` with what lies between the bench:guard markers replaced by `block`; ValueError without the markers."""
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {START_MARKER} … {END_MARKER} block")
    return f"{text[: start + len(START_MARKER)]}\n{block}\n{text[end:]}"


async def run() -> dict[str, float]:
    """Run the benchmarks once; each figure by its key in FIGURES."""
    from bench.pipeline import HEADER, SIZES, measure  # here, so that loading this file for its logic stays light
    from bench.telegram import HEADER as TELEGRAM_HEADER, batch

    figures: dict[str, float] = {}
    machine = [reference() for _ in range(REFERENCES)]
    print(HEADER)
    for sessions, messages in SIZES:
        with tempfile.TemporaryDirectory(prefix="switchboard-bench-") as folder:
            result = await measure(sessions, messages, Path(folder))
        print(result.row(), flush=True)
        figures[f"pipeline_{sessions}_rate"] = result.rate
        figures[f"pipeline_{sessions}_p50_ms"] = result.p50_ms
        figures[f"pipeline_{sessions}_p99_ms"] = result.p99_ms
    machine += [reference() for _ in range(REFERENCES)]
    print()
    print(f"{TELEGRAM_HEADER} {'cpu ms':>7}")
    batches = []
    for dms, users, rate_key, cpu_key in TELEGRAM_BATCHES:
        telegram = await batch(dms, users, False, settle=0.5)
        print(f"{telegram.row()} {telegram.cpu_ms:>7.2f}", flush=True)
        if telegram.lost or telegram.duplicates:
            print(f"note: {telegram.lost} replies lost and {telegram.duplicates} duplicated in the Telegram batch")
        figures[rate_key], figures[cpu_key] = telegram.rate, telegram.cpu_ms
        batches.append(telegram)
    starts = batches + [await batch(0, 1, False, settle=0) for _ in range(STARTS - len(batches))]
    print(f"starts: {', '.join(f'{start.first_poll:.2f} s / {start.idle_mib:.1f} MiB' for start in starts)}")
    figures["startup_s"] = statistics.median(start.first_poll for start in starts)
    figures["idle_rss_mib"] = statistics.median(start.idle_mib for start in starts)
    machine += [reference() for _ in range(REFERENCES)]
    figures[MACHINE.key] = statistics.median(machine)
    print(f"the machine's reference workload: {figures[MACHINE.key]:.1f} ms (median of {len(machine)})")
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--save", action="store_true", help="write this run as the baseline")
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's figures table from this run")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="the baseline file (default: %(default)s)")
    parser.add_argument(
        "--runs", type=int, default=1, help="run everything this many times; each figure is their median (default: 1)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs takes a number of runs, 1 or more")
    began = time.monotonic()
    print(f"Python {platform.python_version()}, {os.cpu_count()} cores; pipeline latency in ms, start-up in s")
    figures = median_figures([asyncio.run(run()) for _ in range(args.runs)])
    baseline = read_baseline(args.baseline)
    comparisons = compare(figures, baseline)
    print()
    if baseline is not None:
        on = baseline.get("machine", {})
        print(
            f"baseline: {args.baseline.name} of {baseline.get('date')}, commit {baseline.get('commit')},"
            f" {on.get('cores')} cores, Python {on.get('python')}"
        )
    print(table(comparisons))
    print(summary(comparisons, baseline))
    now = record(figures, date=datetime.date.today().isoformat(), revision=commit(), on=machine(), runs=args.runs)
    if args.save:
        write_baseline(args.baseline, now)
        print(f"saved as the baseline: {args.baseline}")
    if args.readme:
        text = rewrite_readme(README.read_text(encoding="utf-8"), readme_block(figures, now))
        README.write_text(text, encoding="utf-8")
        print(f"rewrote the figures table in {README}")
    print(f"({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
