"""The flake hunt (`make flaky`): the whole suite N times, every run after the first under a CPU hog on every core;
prints each test that failed at least once, how often, and where it first failed."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# pytest's long failure report ends with "path.py:LINE: ExceptionName"; its last such line is where the test failed.
WHERE = re.compile(r"^(\S+\.py):(\d+): ", re.MULTILINE)


@dataclass
class Failure:
    runs: list[int] = field(default_factory=list)
    first_line: str = ""


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def cpu_hog(processes: int) -> Iterator[None]:
    """One busy loop per core, in processes of their own, ended whatever happens."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(processes)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def counted(report: Path) -> str:
    """'N tests, F failed, E errors, S skipped' from a JUnit XML report."""
    suite = ElementTree.parse(report).getroot().find("testsuite")
    if suite is None:
        return "no report"
    return ", ".join(
        f"{suite.get(key, '0')} {word}"
        for key, word in (("tests", "tests"), ("failures", "failed"), ("errors", "errors"), ("skipped", "skipped"))
    )


def failures(report: Path) -> Iterator[tuple[str, str]]:
    """(test id, first failing line) for every failed or erroring test in a JUnit XML report."""
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        for problem in (*case.findall("failure"), *case.findall("error")):
            module = case.get("classname", "").replace(".", "/")
            test_id = f"{module}.py::{case.get('name')}" if module else str(case.get("name"))
            text = problem.text or ""
            places = WHERE.findall(text)
            place = f"{places[-1][0]}:{places[-1][1]}" if places else "?"
            message = (problem.get("message") or "").strip().splitlines()
            yield test_id, f"{place}: {message[0] if message else ''}"[:300]


def run_suite(number: int, hog: bool, pytest_args: list[str], folder: Path) -> tuple[int, Path, float]:
    report = folder / f"run-{number}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *pytest_args]
    began = time.monotonic()
    if hog:
        with cpu_hog(cores()):
            code = subprocess.call(command, cwd=ROOT)
    else:
        code = subprocess.call(command, cwd=ROOT)
    return code, report, time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", "5")))
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. a test file)")
    options = parser.parse_args(argv)
    found: dict[str, Failure] = {}
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="flake-hunt-") as folder:
        for number in range(1, options.runs + 1):
            hog = number > 1
            label = f"run {number}/{options.runs}" + (f" (CPU hog on {cores()} cores)" if hog else "")
            print(f"\n=== flake hunt: {label}", flush=True)
            code, report, seconds = run_suite(number, hog, options.pytest_args, Path(folder))
            failed = list(failures(report)) if report.exists() else []
            for test_id, first_line in failed:
                found.setdefault(test_id, Failure(first_line=first_line)).runs.append(number)
            if code != 0 and not failed:  # no report, or a failure outside any test (e.g. the leak check)
                found.setdefault(f"(the run as a whole: pytest exit code {code})", Failure()).runs.append(number)
            counts = counted(report) if report.exists() else "no report"
            summary.append(f"{label}: exit {code}, {counts}, {seconds:.0f} s")
    print("\n=== flake hunt summary")
    print("\n".join(summary))
    if not found:
        print(f"no test failed in {options.runs} runs")
        return 0
    print(f"{len(found)} test(s) failed at least once:")
    for test_id, entry in sorted(found.items(), key=lambda item: -len(item[1].runs)):
        print(f"  {len(entry.runs)}/{options.runs} (runs {', '.join(map(str, entry.runs))})  {test_id}")
        if entry.first_line:
            print(f"      first failed at {entry.first_line}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
