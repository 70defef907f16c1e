"""Each package names its public surface in `__all__`: every name there resolves (most are imported on first use),
and importing the packages stays light, so that `bot --help` never pays for a platform SDK."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGES = ("bot", "bot.config", "bot.errors", "channels", "routing", "agent", "agent.providers", "tools")
LAZY = ("bot", "bot.config", "bot.errors", "channels", "agent", "agent.providers", "tools")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_name_in_all_resolves(name: str) -> None:
    package = importlib.import_module(name)
    public = package.__all__
    assert public and len(set(public)) == len(public)
    for attribute in public:
        assert getattr(package, attribute) is not None, f"{name}.{attribute}"
    assert set(public) <= set(dir(package))


@pytest.mark.parametrize("name", LAZY)
def test_a_lazy_package_finds_exactly_its_public_names(name: str) -> None:
    """`__all__` is the table of homes; what type checkers read (the `TYPE_CHECKING` imports) is the same names,
    each from the module the table names."""
    package = importlib.import_module(name)
    assert package.__all__ == list(package._HOMES)
    tree = ast.parse(Path(package.__file__).read_text())
    checked = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imports = [node for node in checked.body if isinstance(node, ast.ImportFrom)]
    typed = {alias.name: node.module for node in imports for alias in node.names}
    assert typed == package._HOMES
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'NoSuchName'"):
        package.NoSuchName  # noqa: B018


def test_a_public_name_is_the_object_its_module_defines() -> None:
    from bot import App
    from bot.app import App as DefinedApp
    from channels import MemoryChannel
    from channels.memory import MemoryChannel as DefinedChannel

    assert App is DefinedApp and MemoryChannel is DefinedChannel


def test_importing_the_packages_imports_no_platform_sdk_and_nothing_heavy() -> None:
    probe = textwrap.dedent(
        """
        import sys
        import bot, channels, agent, agent.providers, tools, routing
        heavy = {"telegram", "discord", "slack_bolt", "slack_sdk", "pydantic", "yaml", "httpx", "aiohttp"}
        print(sorted({name.split(".")[0] for name in sys.modules} & heavy))
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_every_error_of_the_product_is_importable_from_bot_errors() -> None:
    from import_graph import modules

    import bot.errors
    from routing.errors import SwitchboardError

    for module in modules():
        if not module.endswith("__main__"):
            importlib.import_module(module)  # every error class defined anywhere, registered as a subclass
    found, stack = set(), [SwitchboardError]
    while stack:
        error = stack.pop()
        found.add(error)
        stack.extend(error.__subclasses__())
    ours = ("bot", "channels", "routing", "agent", "tools")
    public = {error for error in found if error.__module__.split(".")[0] in ours and not error.__name__.startswith("_")}
    assert {error.__name__ for error in public} == set(bot.errors.__all__)
    assert all(getattr(bot.errors, error.__name__) is error for error in public)
