"""Tool parameter schemas rewritten into the JSON-Schema dialect each provider accepts."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

from tools.base import RunInfo, Tool

Schema = dict[str, Any]
# Which JSON-Schema dialect a provider's tool parameters must be normalized to (each provider says which).
SchemaDialect = Literal["openai", "gemini", "anthropic"]
_DIALECTS = ("openai", "gemini", "anthropic")

# Keywords whose value is a map of names to schemas, a list of schemas, or one schema. Every other
# keyword holds plain data (`default`, `enum`, `const`, `examples` ...), never rewritten.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_ONE = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
# What Gemini's function declarations reject wherever they appear in the tree.
_GEMINI_DROP = frozenset({"$schema", "additionalProperties", "default", "pattern"})
_GEMINI_FORMATS = frozenset({"enum", "date-time"})
_NULL: Schema = {"type": "null"}


def _rebuild(node: Schema, visit: Callable[[Any], Any]) -> Schema:
    """A new node: `visit` applied to each child schema, other values copied as they are."""
    out: Schema = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: visit(child) for name, child in value.items()}
        elif (key in _SCHEMA_LISTS or key in _SCHEMA_ONE) and isinstance(value, list):
            out[key] = [visit(child) for child in value]  # draft-4 tuple `items` is a list of schemas too
        elif key in _SCHEMA_ONE and isinstance(value, dict):
            out[key] = visit(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _map_schema(node: Any, fn: Callable[[Schema], Schema]) -> Any:
    """A new tree with `fn` applied to every schema node, children first; plain data is copied untouched."""
    if not isinstance(node, dict):
        return copy.deepcopy(node)  # `true`/`false` schemas, or malformed input left as it is
    return fn(_rebuild(node, lambda child: _map_schema(child, fn)))


def _resolve_pointer(root: Schema, ref: str) -> Any:
    if not ref.startswith("#"):
        raise ValueError(f"cannot inline external $ref {ref!r}")
    node: Any = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"unresolvable $ref {ref!r}")
        node = node[part]
    return node


def _recursion_stub(target: Any) -> Schema:
    """What stands in for a schema inside itself: its type (and description), without the recursion."""
    if not isinstance(target, dict):
        return {}
    stub = {key: target[key] for key in ("type", "description") if key in target}
    return copy.deepcopy(stub)


def _inline_refs(root: Schema) -> Schema:
    """A copy of `root` with every local `$ref` replaced by what it points to, and `$defs`/`definitions` gone."""

    def inline(node: Any, expanding: tuple[str, ...]) -> Any:
        if not isinstance(node, dict):
            return copy.deepcopy(node)
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = _resolve_pointer(root, ref)
            resolved = _recursion_stub(target) if ref in expanding else inline(target, (*expanding, ref))
            # Keywords written next to the $ref (a field's description, default) describe the use site.
            siblings = inline({key: value for key, value in node.items() if key != "$ref"}, expanding)
            return {**resolved, **siblings} if isinstance(resolved, dict) else resolved
        kept = {key: value for key, value in node.items() if key not in ("$defs", "definitions")}
        return _rebuild(kept, lambda child: inline(child, expanding))

    inlined: Schema = inline(root, ())
    return inlined


def _tidy(node: Schema) -> Schema:
    """Drop pydantic's `title`s and `discriminator`s; merge in a lone `allOf` member (older pydantic wraps refs so)."""
    node.pop("title", None)
    # OpenAPI's `discriminator` maps values to `$defs` entries that no longer exist once refs are inlined.
    node.pop("discriminator", None)
    members = node.get("allOf")
    if isinstance(members, list) and len(members) == 1 and isinstance(members[0], dict):
        del node["allOf"]
        node = {**members[0], **node}
    return node


def _merge_property(first: Any, second: Any) -> Any:
    """One property written by several union members: enums and consts merge, other differences become anyOf."""
    if first == second:
        return first
    values_a, values_b = _enum_values(first), _enum_values(second)
    if values_a is not None and values_b is not None:
        merged: Schema = {key: first[key] for key in ("type", "description") if key in first}
        if first.get("type") != second.get("type"):
            merged.pop("type", None)
        merged["enum"] = values_a + [value for value in values_b if value not in values_a]
        return merged
    if second in _choices(first):  # e.g. Optional[str] and str: the wider one covers both
        return first
    if first in _choices(second):
        return second
    merged_choices = _choices(first) if isinstance(first, dict) and list(first) == ["anyOf"] else [first]
    return {"anyOf": [*merged_choices, second]}


def _choices(schema: Any) -> list[Any]:
    members = schema.get("anyOf") if isinstance(schema, dict) else None
    return members if isinstance(members, list) else [schema]


def _enum_values(schema: Any) -> list[Any] | None:
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _objects(members: Any) -> list[Schema]:
    """The object schemas among a union's members (a `null` or scalar member has no properties to offer)."""
    if not isinstance(members, list):
        return []
    return [m for m in members if isinstance(m, dict) and (m.get("type") == "object" or "properties" in m)]


def _object_root(schema: Schema) -> Schema:
    """The root as `{"type": "object", "properties": ...}`, with root-level anyOf/oneOf/allOf flattened.

    allOf members all apply, so their properties and requirements add up. anyOf/oneOf members are
    alternatives: the flattened object offers every member's properties and requires only what every
    member requires (the tool's own pydantic model still validates the shape the model sends).
    """
    root = dict(schema)
    every = _objects(root.pop("allOf", None))
    alternatives = _objects(root.pop("anyOf", None)) + _objects(root.pop("oneOf", None))
    kind = root.pop("type", None)
    if kind not in (None, "object") or (kind is None and not ("properties" in root or every or alternatives)):
        raise ValueError(f"tool parameters must be an object schema, not {kind or 'an untyped schema'!r}")
    properties: Schema = dict(root.pop("properties", {}))
    required: list[str] = list(root.pop("required", []))
    for member in every + alternatives:
        for name, prop in member.get("properties", {}).items():
            properties[name] = _merge_property(properties[name], prop) if name in properties else prop
    for member in every:
        required += member.get("required", [])
    if alternatives:
        common = set.intersection(*(set(member.get("required", [])) for member in alternatives))
        required += [name for name in alternatives[0].get("required", []) if name in common]
    out: Schema = {"type": "object", **root, "properties": properties}
    if required:
        out["required"] = list(dict.fromkeys(required))
    return out


def _gemini(node: Schema) -> Schema:
    """Gemini's subset: no keywords it rejects, no `const`/`oneOf`, and Optional[X] is just X."""
    for key in _GEMINI_DROP & node.keys():
        del node[key]
    if "format" in node and node["format"] not in _GEMINI_FORMATS:
        del node["format"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf") + node.pop("anyOf", [])
    members = node.get("anyOf")
    if isinstance(members, list):
        rest: list[Any] = []
        for member in members:  # no null, and no duplicates (dropped keywords can leave some)
            if member != _NULL and member not in rest:
                rest.append(member)
        if not rest:
            return node  # only null: nothing better to offer
        if len(rest) == 1 and isinstance(rest[0], dict):
            del node["anyOf"]
            return {**rest[0], **node}  # the use site's own keywords (its description) win over the member's
        node["anyOf"] = rest
    return node


def normalize_schema(schema: dict[str, Any], dialect: SchemaDialect) -> dict[str, Any]:
    """A copy of `schema` that `dialect`'s provider accepts as tool parameters; `schema` is left unchanged.

    Every dialect: `$ref`s inlined (a recursive one becomes its bare type), no `title`s, and an
    object root. openai and anthropic keep everything else; gemini also loses the keywords it rejects.
    """
    if dialect not in _DIALECTS:
        raise ValueError(f"unknown schema dialect {dialect!r}; expected one of {', '.join(_DIALECTS)}")
    tidy = _map_schema(_inline_refs(schema), _tidy)
    root = _object_root(tidy)
    if dialect == "gemini":
        root = _map_schema(root, _gemini)
    return root


def tool_schema(tool: Tool, dialect: SchemaDialect, run: RunInfo | None = None) -> dict[str, Any]:
    """A tool's parameters as `dialect`'s JSON Schema (for `run`, where the tool shapes it per run)."""
    return normalize_schema(tool.json_schema(run), dialect)
