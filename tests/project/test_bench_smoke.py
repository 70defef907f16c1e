"""The benchmarks run (once, tiny, figures unchecked), and the guard's comparison holds on fixed numbers."""

from __future__ import annotations

import json
import random
import runpy
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"


def load(name: str) -> dict[str, Any]:
    return runpy.run_path(str(BENCH / name), run_name="bench_smoke")


async def test_the_pipeline_benchmark_runs(tmp_path: Path) -> None:
    result = await load("pipeline.py")["measure"](2, 6, tmp_path)
    assert (result.sessions, result.messages) == (2, 6)
    assert result.row().split()[:2] == ["2", "6"]


async def test_the_telegram_benchmark_runs() -> None:
    result = await load("telegram.py")["batch"](6, 2, False)
    assert result.row().split()[0] == "off"
    assert (result.lost, result.duplicates, result.rate_limited) == (0, 0, 0)
    assert result.cpu_ms > 0 and 0 < result.idle_mib <= result.peak_mib


async def test_the_soak_benchmark_runs_and_the_database_shrinks_after_pruning() -> None:
    result = await load("soak.py")["soak"](20, 2, 10)
    assert [step.answered for step in result.steps] == [10, 20]
    assert result.lost == 0
    assert result.pruned["inbound"] == 20
    assert result.db_pruned < result.db_stopped


def test_the_routing_benchmark_builds_its_bindings_and_inputs() -> None:
    bench = load("routing.py")
    bindings = bench["make_bindings"](100, random.Random(1))
    inputs = bench["make_inputs"](100, random.Random(1), size=50)
    assert len(bindings) == 101 and len(inputs) == 50


async def test_the_prompt_cache_benchmark_runs(tmp_path: Path) -> None:
    bench = load("prompt_cache.py")
    rows = await bench["conversation"]("anthropic", 2, tmp_path)
    assert [row.label for row in rows] == ["1a", "1b", "2a", "2b"]
    assert rows[-1].breakpoints[0] == "system"


async def test_the_transcript_benchmark_measures_what_a_run_loads(tmp_path: Path) -> None:
    bench = load("transcripts.py")
    path = await bench["transcript_of"](tmp_path, 600)
    assert len(bench["compactions"](600)) >= 2
    await bench["measure"](path, 600)  # checks what the reads return before timing them


async def test_the_media_benchmark_runs() -> None:
    idle, peak, _ = await load("media.py")["measure"](2, 1)
    assert 0 < idle <= peak


async def test_the_cluster_benchmark_runs(postgres_server: Any) -> None:
    [row] = await load("cluster.py")["row"](postgres_server, 1, 6, 2)
    columns = row.split()
    assert columns[:2] == ["1", "6/2"]
    assert columns[6:9] == ["0", "0", "0"]  # nothing lost, duplicated or out of order


def test_the_guard_marks_a_figure_more_than_15_percent_worse_in_its_direction() -> None:
    guard = load("guard.py")
    figure, comparison = guard["Figure"], guard["Comparison"]
    rate = figure("rate", "throughput", "msg/s", True, 0)
    latency = figure("p50", "latency", "ms", False, 2)
    marks = {(rate.key, now): comparison(rate, now, 100.0).mark for now in (80.0, 85.0, 86.0, 100.0, 114.0, 120.0)} | {
        (latency.key, now): comparison(latency, now, 100.0).mark for now in (80.0, 90.0, 115.0, 116.0, 200.0)
    }
    assert marks == {
        ("rate", 80.0): "WORSE >15%",
        ("rate", 85.0): "",  # exactly 15 % is not more than 15 %
        ("rate", 86.0): "",
        ("rate", 100.0): "",
        ("rate", 114.0): "",
        ("rate", 120.0): "better >15%",
        ("p50", 80.0): "better >15%",
        ("p50", 90.0): "",
        ("p50", 115.0): "",
        ("p50", 116.0): "WORSE >15%",
        ("p50", 200.0): "WORSE >15%",
    }
    assert comparison(rate, 80.0, 100.0).ratio == 0.8 and comparison(rate, 80.0, 100.0).worse == 0.2
    assert comparison(latency, 80.0, 100.0).worse == -0.2
    assert comparison(rate, 80.0, None).mark == "no baseline" and comparison(rate, 80.0, None).ratio is None
    assert comparison(rate, 80.0, 0.0).ratio is None and comparison(rate, float("nan"), 1.0).mark == "n/a"


def test_the_guard_compares_a_run_with_its_baseline_and_sums_it_up() -> None:
    guard = load("guard.py")
    run = {"pipeline_1_rate": 100.0, "pipeline_1_p50_ms": 3.0, "startup_s": 0.6, "idle_rss_mib": 70.0}
    baseline = {
        "date": "2026-11-28",
        "commit": "abc1234",
        "figures": {"pipeline_1_rate": 200.0, "pipeline_1_p50_ms": 3.1, "startup_s": 0.5},
    }
    comparisons = guard["compare"](run, baseline)
    assert [(item.figure.key, item.baseline, item.mark) for item in comparisons] == [
        ("pipeline_1_rate", 200.0, "WORSE >15%"),
        ("pipeline_1_p50_ms", 3.1, ""),
        ("startup_s", 0.5, "WORSE >15%"),
        ("idle_rss_mib", None, "no baseline"),
    ]
    printed = guard["table"](comparisons).splitlines()
    assert len(printed) == 5 and printed[1].split()[-6:] == ["100", "200", "0.50", "-", "WORSE", ">15%"]
    summary = guard["summary"](comparisons, baseline)
    assert summary.startswith(
        "guard: 2 of 4 figures more than 15 % worse than the baseline of 2026-11-28 (commit abc1234)"
    )
    assert "1 without a comparison" in summary and summary.endswith("start-up: `bot run` → first getUpdates")
    assert "no figure more than 15 % worse" in guard["summary"](guard["compare"](run, {"figures": run}), baseline)
    assert "no baseline" in guard["summary"](guard["compare"](run, None), None)


def test_the_guard_allows_for_the_machines_speed_where_a_figure_moves_with_it() -> None:
    guard = load("guard.py")
    run = {
        "machine_ms": 84.0,  # the reference took 1.2 times the baseline's time: the machine ran slower
        "pipeline_1000_rate": 80.0,
        "pipeline_1_p50_ms": 2.6,
        "startup_s": 0.75,
        "idle_rss_mib": 90.0,
    }
    figures = {"machine_ms": 70.0, "pipeline_1000_rate": 100.0, "pipeline_1_p50_ms": 2.0, "startup_s": 0.5}
    baseline = {"date": "2026-11-29", "commit": "abc1234", "figures": figures | {"idle_rss_mib": 75.0}}
    comparisons = {item.figure.key: item for item in guard["compare"](run, baseline)}
    allowing = {key: None if item.allowing is None else round(item.allowing, 3) for key, item in comparisons.items()}
    assert allowing == {
        "machine_ms": None,  # the machine's own figure is not allowed for itself
        "pipeline_1000_rate": 0.96,  # a rate: times the machine's ratio
        "pipeline_1_p50_ms": 1.083,  # a time: divided by it
        "startup_s": 1.25,
        "idle_rss_mib": 1.2,  # memory does not move with the machine's speed
    }
    assert {key: item.mark for key, item in comparisons.items()} == {
        "machine_ms": "",  # never marked: it is not the code's
        "pipeline_1000_rate": "WORSE >15% (the machine)",
        "pipeline_1_p50_ms": "WORSE >15% (the machine)",
        "startup_s": "WORSE >15%",
        "idle_rss_mib": "WORSE >15%",
    }
    summary = guard["summary"](list(comparisons.values()), baseline)
    assert summary.startswith("guard: 4 of 5 figures more than 15 % worse than the baseline of 2026-11-29")
    assert summary.endswith(
        "the machine took 1.20 times the baseline's time for its reference workload; allowing for it, 2 still are:"
        " start-up: `bot run` → first getUpdates; idle RSS, 1 s after the first getUpdates"
    )
    faster = guard["compare"]({**run, "machine_ms": 56.0}, baseline)  # a faster machine hides nothing either
    assert [item.mark for item in faster][1:3] == ["WORSE >15%", "WORSE >15%"]
    without = guard["compare"]({key: value for key, value in run.items() if key != "machine_ms"}, baseline)
    assert [(item.allowing, item.mark) for item in without][:1] == [(None, "WORSE >15%")]
    assert "reference workload" not in guard["summary"](without, baseline)
    assert guard["reference"]() > 0


def test_the_guard_writes_and_reads_its_baseline(tmp_path: Path) -> None:
    guard = load("guard.py")
    path = tmp_path / "baseline.json"
    assert guard["read_baseline"](path) is None
    run = {"idle_rss_mib": 70.123456, "pipeline_1_rate": 250.0, "not_a_figure": 1.0}
    machine = {"cores": 2, "python": "3.11.7"}
    record = guard["record"](run, date="2026-11-29", revision="abc1234", on=machine, runs=3)
    guard["write_baseline"](path, record)
    assert json.loads(path.read_text()) == {
        "date": "2026-11-29",
        "commit": "abc1234",
        "machine": machine,
        "runs": 3,
        "figures": {"pipeline_1_rate": 250.0, "idle_rss_mib": 70.1235},  # FIGURES' order, known figures only
    }
    assert guard["read_baseline"](path) == record
    assert [item.mark for item in guard["compare"](run, record)] == ["", ""]


def test_the_committed_baseline_holds_every_figure_of_the_guard() -> None:
    guard = load("guard.py")
    baseline = guard["read_baseline"](BENCH / "baseline.json")
    assert baseline is not None
    assert list(baseline["figures"]) == [figure.key for figure in guard["FIGURES"]]
    assert set(baseline) == {"date", "commit", "machine", "runs", "figures"}
    assert set(baseline["machine"]) == {"cores", "python"} and baseline["runs"] >= 1


def test_the_guard_takes_each_figures_median_over_its_runs() -> None:
    guard = load("guard.py")
    runs = [{"pipeline_1_rate": 300.0, "startup_s": 0.9}, {"pipeline_1_rate": 250.0, "startup_s": 0.5}]
    runs.append({"pipeline_1_rate": 280.0, "startup_s": 0.6})
    assert guard["median_figures"](runs) == {"pipeline_1_rate": 280.0, "startup_s": 0.6}


def test_the_guard_rewrites_only_the_readme_block_between_its_markers() -> None:
    guard = load("guard.py")
    start, end = guard["START_MARKER"], guard["END_MARKER"]
    record = {"date": "2026-11-29", "commit": "abc1234", "machine": {"cores": 2, "python": "3.11.7"}}
    block = guard["readme_block"]({"pipeline_1_rate": 250.4, "startup_s": 0.512}, record)
    assert block.splitlines()[:4] == [
        "| figure | value | better |",
        "|---|---:|---|",
        "| pipeline, 1 session, 300 messages: throughput | 250 msg/s | higher |",
        "| start-up: `bot run` → first getUpdates | 0.51 s | lower |",
    ]
    assert (
        "Measured 2026-11-29 by `bench/guard.py --readme` (commit abc1234; 2 cores, Python 3.11.7):\none run;" in block
    )
    medians = guard["readme_block"]({"startup_s": 0.5}, record | {"runs": 3})
    assert "(commit abc1234; 2 cores, Python 3.11.7):\neach figure the median of 3 runs;" in medians
    text = f"## Performance\n\nIntro.\n{start}\nold table\n{end}\n\nThe rest.\n"
    assert (
        guard["rewrite_readme"](text, "new table")
        == f"## Performance\n\nIntro.\n{start}\nnew table\n{end}\n\nThe rest.\n"
    )
    with pytest.raises(ValueError, match="no <!-- bench:guard:start -->"):
        guard["rewrite_readme"]("## Performance\n", "new table")
    readme = (BENCH.parent / "README.md").read_text(encoding="utf-8")
    assert readme.count(start) == 1 and readme.count(end) == 1
    assert readme.index("## Performance") < readme.index(start) < readme.index(end)
