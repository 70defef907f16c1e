"""What an install ships (issue 24): the packages are named explicitly with the repository root as their root, so
setuptools prints no flat-layout warning, and every file inside them that is not Python is declared package data
(the shipped skills), so an install from a wheel has it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("bot", "channels", "routing", "agent", "tools")


def setuptools_config() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    section = data["tool"]["setuptools"]
    assert isinstance(section, dict)
    return section


def test_the_packages_are_declared_explicitly() -> None:
    section = setuptools_config()
    assert section["package-dir"] == {"": "."}  # no flat-layout guess, no "Editable installation" warning
    find = section["packages"]
    assert isinstance(find, dict)
    include = find["find"]["include"]
    assert sorted(include) == sorted(f"{name}*" for name in PACKAGES)
    tops = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert tops == set(PACKAGES)  # a new top-level package must be added to the list (tests and bench are none)


def test_every_file_in_the_packages_that_is_not_python_is_package_data() -> None:
    data = setuptools_config()["package-data"]
    assert isinstance(data, dict)
    declared = {
        path
        for package, patterns in data.items()
        for pattern in patterns
        for path in (ROOT / package.replace(".", "/")).glob(pattern)
        if path.is_file()
    }
    shipped = {
        path
        for name in PACKAGES
        for path in (ROOT / name).rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }
    assert shipped, "the shipped skills are not found"
    assert shipped <= declared, sorted(str(path.relative_to(ROOT)) for path in shipped - declared)
