"""The benchmarks still run: each is driven once with tiny sizes (their figures are not checked here)."""

from __future__ import annotations

import random
import runpy
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"


def load(name: str) -> dict[str, Any]:
    return runpy.run_path(str(BENCH / name), run_name="bench_smoke")


async def test_the_pipeline_benchmark_runs(tmp_path: Path) -> None:
    row = await load("pipeline.py")["measure"](2, 6, tmp_path)
    assert row.split()[:2] == ["2", "6"]


async def test_the_telegram_benchmark_runs() -> None:
    row = await load("telegram.py")["batch"](6, 2, False)
    columns = row.split()
    assert columns[0] == "off"
    assert columns[-3:] == ["0", "0", "0"]  # nothing lost, nothing duplicated, no 429


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
