"""Shared pytest setup: the fake servers in tests/fakes are available as fixtures everywhere."""

pytest_plugins = ["fakes.llm", "fakes.bridge", "fakes.slack", "fakes.telegram", "fakes.discord"]
