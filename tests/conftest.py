"""Shared pytest setup: the fake servers in tests/fakes are available as fixtures everywhere, and the leak check
(tests/leaks.py) fails the run if the suite leaves a process or a temporary file behind."""

pytest_plugins = [
    "fakes.llm",
    "fakes.bridge",
    "fakes.slack",
    "fakes.telegram",
    "fakes.discord",
    "leaks",
    "postgres",
    "stores",
    "pytester",
]
