"""Turns nobody typed: cron jobs and heartbeats on the scheduler's clock, subagents and messages between sessions,
each run with the trust of whoever started it."""
