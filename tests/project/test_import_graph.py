"""The house rules the tree keeps: no import circle, no import against the declared order of the rooms (type-only and
function-level imports counted too), no product module over 700 lines, and each room saying what it is for."""

from __future__ import annotations

import ast

from import_graph import ORDER, ROOT, circles, graph, modules, room, upward

MAX_LINES = 700


def test_no_import_circle_anywhere_in_the_product() -> None:
    found = circles(graph())
    assert found == [], "import circles: " + "; ".join(" <-> ".join(sorted(group)) for group in found)


def test_no_module_imports_a_room_after_its_own() -> None:
    found = upward(graph())
    assert found == set(), "imports against the order of tests/import_graph.py's ORDER: " + ", ".join(
        f"{module} -> {target}" for module, target in sorted(found)
    )


def test_every_product_module_lives_in_a_room_of_the_declared_order() -> None:
    homeless = []
    for module in modules():
        try:
            room(module)
        except ValueError:
            homeless.append(module)
    assert homeless == []


def test_the_checks_see_a_circle_and_an_upward_import() -> None:
    # the two checks above on a small graph of their own: a circle found whatever its size, and an arrow that
    # climbs the order found while one that descends is not
    edges = {"bot.intake.a": {"bot.turns.b"}, "bot.turns.b": {"bot.intake.a"}, "bot.config.c": {"bot.app"}}
    edges["bot.app"] = {"bot.config.c"}
    assert sorted(map(sorted, circles(edges))) == [["bot.app", "bot.config.c"], ["bot.intake.a", "bot.turns.b"]]
    assert upward(edges) == {("bot.turns.b", "bot.intake.a"), ("bot.config.c", "bot.app")}


def test_no_product_module_is_over_700_lines() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in modules().values()}
    assert {path: lines for path, lines in sizes.items() if lines > MAX_LINES} == {}


def test_each_room_and_module_says_what_it_is_for() -> None:
    silent = [
        str(path.relative_to(ROOT))
        for path in modules().values()
        if ast.get_docstring(ast.parse(path.read_text())) is None and path.read_text().strip()
    ]
    assert silent == []
    rooms = [name for name in ORDER if name.startswith("bot.") and (ROOT / name.replace(".", "/")).is_dir()]
    assert len(rooms) >= 10  # config, store, runs, approvals, delivery, turns, intake, scheduled, gateway, cli …


def test_distinct_things_have_distinct_names() -> None:
    # A public class or type alias is defined in one module of the product; the packages' re-exports do not count
    defined: dict[str, list[str]] = {}
    for module, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):  # X = Callable[...] etc.
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
            else:
                names = []
            for name in names:
                if not name.startswith("_"):
                    defined.setdefault(name, []).append(module)
    assert {name: homes for name, homes in defined.items() if len(homes) > 1} == {}
