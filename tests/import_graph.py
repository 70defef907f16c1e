"""The import graph of the product packages (every import: at the top, type-only and inside functions alike), its
circles and the arrows that point up the declared order. `python tests/import_graph.py` prints the figures."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("routing", "channels", "tools", "agent", "bot")

# The rooms, lowest first: a module may import its own room and any room before it, never one after it
# (../shared/DESIGN.md, "The layout"). `bot` itself (its public names) and `bot.__main__` come last.
ORDER = (
    "routing",
    "channels",
    "tools",
    "agent",
    "bot.observe",
    "bot.plugins",
    "bot.config",
    "bot.store",
    "bot.runs",
    "bot.approvals",
    "bot.delivery",
    "bot.turns",
    "bot.intake",
    "bot.scheduled",
    "bot.gateway",
    "bot.app",
    "bot.cli",
    "bot.errors",
    "bot.__main__",
    "bot",
)

Graph = dict[str, set[str]]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every product module by its dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path) -> Iterator[str]:
    """The dotted names `module` imports (with each `from x import y` also as `x.y`: y may be a module)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def graph(root: Path = ROOT) -> Graph:
    """module -> the product modules it imports."""
    known = modules(root)

    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: Graph = {}
    for module, path in known.items():
        targets = {owner(name) for name in _imported(module, path)}
        edges[module] = {target for target in targets if target is not None and target != module}
    return edges


def circles(edges: Graph) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def room(module: str) -> str:
    """The room of ORDER a module lives in."""
    for name in sorted(ORDER, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    raise ValueError(f"{module} is in no room of ORDER")


def upward(edges: Graph) -> set[tuple[str, str]]:
    """The imports of a room that comes later in ORDER than the importer's."""
    rank = {name: place for place, name in enumerate(ORDER)}
    return {
        (module, target)
        for module, targets in edges.items()
        for target in targets
        if rank[room(target)] > rank[room(module)]
    }


def main() -> None:
    edges = graph()
    found = circles(edges)
    arrows = upward(edges)
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports between them")
    print(f"{len(found)} circle(s)")
    for group in found:
        print(f"  {len(group)}: {', '.join(sorted(group))}")
    print(f"{len(arrows)} upward import(s)")
    for module, target in sorted(arrows):
        print(f"  {module} -> {target}")


if __name__ == "__main__":
    main()
