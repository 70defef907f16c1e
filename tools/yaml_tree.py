"""Read YAML (bindings.yaml, a skill's front matter) into plain data with scalars kept as written, and the line of every
key and list item."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]

# YAML 1.1 would turn `0123` into 83, `no` into False and `-1001234567890` into an int; the config
# schema decides types instead, so plain scalars stay text and only null is resolved here.
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_MAX_NODES = 1_000_000  # alias bombs expand exponentially; 10,000 bindings are about 70,000 nodes
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml's parser when PyYAML has it: about 4x faster on long binding lists, same nodes.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class YamlProblem:
    """Something wrong in the YAML itself, with the 1-based line it is on."""

    path: Path
    line: int
    message: str


@dataclass
class YamlTree:
    """Parsed data plus where each part came from; `problems` is empty for a clean document."""

    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    problems: list[YamlProblem] = field(default_factory=list)

    def line_of(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that appears in the file (1 for the root)."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


class _Builder:
    def __init__(self) -> None:
        self.tree = YamlTree(data=None)
        self.nodes = 0

    def build(self, node: yaml.Node, path: Path) -> Any:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _TooLarge(node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _NULL_TAG and not node.style and node.value in _NULLS:
                return None
            return node.value
        if isinstance(node, yaml.SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                self.tree.lines[(*path, index)] = item.start_mark.line + 1
                items.append(self.build(item, (*path, index)))
            return items
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        raise AssertionError(f"unexpected YAML node {node!r}")

    def mapping(self, node: yaml.MappingNode, path: Path) -> dict[str, Any]:
        # `<<: *anchor` fills in only the keys the mapping does not set itself; it is built first so
        # that the mapping's own keys overwrite the lines it recorded.
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self.merge_source(value_node, path))
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.tree.problems.append(YamlProblem(path, line, "a key must be plain text, not a list or mapping"))
                continue
            key = key_node.value
            if key in result:
                where = self.tree.lines[(*path, key)]
                problem = YamlProblem((*path, key), line, f"duplicate key {key!r} (first set on line {where})")
                self.tree.problems.append(problem)
                continue
            self.tree.lines[(*path, key)] = line
            result[key] = self.build(value_node, (*path, key))
        for key, value in merged.items():
            result.setdefault(key, value)
        return result

    def merge_source(self, node: yaml.Node, path: Path) -> dict[str, Any]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[str, Any] = {}
        for source in reversed(sources):
            if not isinstance(source, yaml.MappingNode):
                line = source.start_mark.line + 1
                self.tree.problems.append(YamlProblem(path, line, "`<<` merges only mappings"))
                continue
            merged.update(self.mapping(source, path))
        return merged


class _TooLarge(Exception):
    def __init__(self, line: int) -> None:
        self.line = line


def parse_yaml(text: str) -> YamlTree:
    """Parse one YAML document; syntax errors come back as problems, never as exceptions."""
    builder = _Builder()
    tree = builder.tree
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        tree.problems.append(YamlProblem((), line, f"invalid YAML: {error.problem or error.context}"))
        return tree
    except yaml.YAMLError as error:
        tree.problems.append(YamlProblem((), 1, f"invalid YAML: {error}"))
        return tree
    if root is None:
        tree.data = {}
        return tree
    tree.lines[()] = root.start_mark.line + 1
    try:
        tree.data = builder.build(root, ())
    except _TooLarge as error:
        tree.problems.append(YamlProblem((), error.line, "document too large (too many nodes or aliases)"))
        tree.data = None
    return tree
