"""Lazy public names for a package's `__init__` (PEP 562): each is imported from its home module on first use, so
importing a package (as every `bot` command does) costs nothing until a name is asked for. Here because every
package of ours may import `routing`, which imports nothing of ours."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of `package`: a name in `homes` (its public surface, which its
    `__all__` lists) is imported from its module when first asked for (and kept in the package, so later look-ups do
    not come back here); any other is an AttributeError."""
    names = sorted(homes)

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
