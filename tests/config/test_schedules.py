"""When scheduled jobs fire (issue 17, first step): cron expressions in a time zone across DST changes, intervals
with a jitter fixed per job, one-shot times; all on plain numbers, so no test waits for a clock."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from bot.config.schedules import CronJob, interval_seconds, jitter_seconds, next_fire

BERLIN = ZoneInfo("Europe/Berlin")


def berlin(*fields: int) -> float:
    return datetime(*fields, tzinfo=BERLIN).timestamp()


def fires(job: CronJob, after: float, count: int, anchor: float = 0.0) -> list[datetime]:
    found = []
    for _ in range(count):
        moment = next_fire(job, after, anchor)
        assert moment is not None
        found.append(datetime.fromtimestamp(moment, BERLIN))
        after = moment
    return found


def test_every_weekday_at_nine_in_berlin_stays_at_nine_across_the_spring_change() -> None:
    job = CronJob(cron="0 9 * * 1-5", tz="Europe/Berlin", message="standup")
    times = fires(job, berlin(2026, 3, 26, 12, 0), 4)  # Thursday noon; clocks go forward on Sunday the 29th
    assert [(t.day, t.hour, t.minute) for t in times] == [(27, 9, 0), (30, 9, 0), (31, 9, 0), (1, 9, 0)]
    assert [t.utcoffset().total_seconds() / 3600 for t in times] == [1, 2, 2, 2]  # type: ignore[union-attr]


def test_a_time_in_the_skipped_hour_fires_at_its_end_and_in_the_repeated_hour_once() -> None:
    job = CronJob(cron="30 2 * * *", tz="Europe/Berlin", message="backup")
    spring = fires(job, berlin(2026, 3, 28, 12, 0), 2)
    assert [(t.day, t.hour, t.minute) for t in spring] == [(29, 3, 0), (30, 2, 30)]
    autumn = fires(job, berlin(2026, 10, 24, 12, 0), 2)
    assert [(t.day, t.hour, t.utcoffset().total_seconds()) for t in autumn] == [(25, 2, 7200), (26, 2, 3600)]  # type: ignore[union-attr]


def test_a_cron_job_fires_strictly_after_the_moment_given() -> None:
    job = CronJob(cron="0 9 * * *", tz="Europe/Berlin", message="x")
    assert next_fire(job, berlin(2026, 5, 4, 9, 0), 0) == berlin(2026, 5, 5, 9, 0)
    assert next_fire(job, berlin(2026, 5, 4, 8, 59, 59), 0) == berlin(2026, 5, 4, 9, 0)


def test_an_interval_counts_from_its_anchor_with_a_jitter_fixed_by_the_job() -> None:
    job = CronJob(id="nightly", every="2h", message="check")
    jitter = jitter_seconds("nightly", 7200)
    assert 0 <= jitter <= 30 and jitter == jitter_seconds("nightly", 7200) != jitter_seconds("other", 7200)
    assert next_fire(job, 1000.0, anchor=1000.0) == 1000.0 + jitter + 7200
    assert next_fire(job, 1000.0 + jitter + 7200, anchor=1000.0) == 1000.0 + jitter + 14400
    assert next_fire(job, 50_000.0, anchor=1000.0) == 1000.0 + jitter + 7 * 7200


@pytest.mark.parametrize(("text", "seconds"), [("1m", 60), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400)])
def test_intervals_are_read_as_people_write_them(text: str, seconds: int) -> None:
    assert interval_seconds(text) == seconds


def test_a_one_shot_time_without_an_offset_is_in_the_job_s_zone_and_fires_once() -> None:
    job = CronJob(at="2026-11-25T09:00", tz="Europe/Berlin", message="call mum")
    assert next_fire(job, berlin(2026, 11, 25, 8, 0), 0) == berlin(2026, 11, 25, 9, 0)
    assert next_fire(job, berlin(2026, 11, 25, 9, 0), 0) is None
    utc = CronJob(at="2026-11-25T09:00+00:00", tz="Europe/Berlin", message="x")
    assert next_fire(utc, 0, 0) == berlin(2026, 11, 25, 10, 0)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"cron": "0 9 * * *", "every": "1h"}, "exactly one of cron, every or at (got cron, every)"),
        ({}, "exactly one of cron, every or at (got none)"),
        ({"every": "30s"}, "shorter than a minute"),
        ({"every": "soon"}, "not an interval"),
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "0 9 * * * *"}, "five fields"),
        ({"cron": "0 9 * * *", "tz": "Europe/Berln"}, "unknown time zone"),
        ({"at": "tomorrow at nine"}, "not an ISO 8601 time"),
        ({"every": "1h", "id": "../x"}, "id"),
        ({"every": "1h", "message": ""}, "message"),
    ],
)
def test_a_job_that_cannot_run_is_refused_saying_why(fields: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CronJob.model_validate({"message": "x"} | fields)
    assert problem in str(caught.value)


def test_a_job_is_one_flat_object_that_round_trips() -> None:
    job = CronJob(
        name="standup", cron="0 9 * * 1-5", tz="Europe/Berlin", message="summarize", deliver="telegram:direct:1"
    )
    assert CronJob.model_validate_json(job.model_dump_json()) == job
    assert set(job.model_dump()) == {
        "id", "name", "agent", "cron", "every", "at", "tz", "message", "session", "deliver", "enabled",
    }  # fmt: skip
    assert len(CronJob(every="1h", message="x").id) == 8
