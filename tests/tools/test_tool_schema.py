"""Schema normalization: refs inlined, titles dropped, an object root, and each provider dialect's rules."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

import pytest
from pydantic import AnyUrl, BaseModel, ConfigDict, Field, RootModel

from agent.providers.base import SchemaDialect
from tools.base import Tool, ToolContext, ToolResult, json_result
from tools.schema import normalize_schema, tool_schema

DIALECTS: tuple[SchemaDialect, ...] = ("openai", "gemini", "anthropic")


class Location(BaseModel):
    """A place to search."""

    path: str = Field(description="Where to look.", pattern=r"^/")
    modified_after: datetime | None = Field(default=None, description="Only newer files.")
    source: AnyUrl | None = None


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(description="A property named like a keyword.")
    pattern: str
    mode: Literal["fast"] = "fast"
    where: Location = Field(description="The main place.")
    fallback: Location | None = None
    limit: int = Field(default=10, ge=1)


# What openai and anthropic get: everything pydantic wrote, minus titles, with Location inlined twice.
LOCATION = {
    "properties": {
        "path": {"description": "Where to look.", "pattern": "^/", "type": "string"},
        "modified_after": {
            "anyOf": [{"format": "date-time", "type": "string"}, {"type": "null"}],
            "default": None,
            "description": "Only newer files.",
        },
        "source": {
            "anyOf": [{"format": "uri", "minLength": 1, "type": "string"}, {"type": "null"}],
            "default": None,
        },
    },
    "required": ["path"],
    "type": "object",
}
SEARCH_ARGS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "title": {"description": "A property named like a keyword.", "type": "string"},
        "pattern": {"type": "string"},
        "mode": {"const": "fast", "default": "fast", "type": "string"},
        "where": {**LOCATION, "description": "The main place."},  # the field's description wins over the class's
        "fallback": {"anyOf": [{**LOCATION, "description": "A place to search."}, {"type": "null"}], "default": None},
        "limit": {"default": 10, "minimum": 1, "type": "integer"},
    },
    "required": ["title", "pattern", "where"],
}

# What gemini gets: no additionalProperties, defaults, patterns or uri formats; Optional[X] is X; const is enum.
GEMINI_LOCATION = {
    "properties": {
        "path": {"description": "Where to look.", "type": "string"},
        "modified_after": {"format": "date-time", "type": "string", "description": "Only newer files."},
        "source": {"minLength": 1, "type": "string"},
    },
    "required": ["path"],
    "type": "object",
}
GEMINI_SEARCH_ARGS = {
    "type": "object",
    "properties": {
        "title": {"description": "A property named like a keyword.", "type": "string"},
        "pattern": {"type": "string"},
        "mode": {"type": "string", "enum": ["fast"]},
        "where": {**GEMINI_LOCATION, "description": "The main place."},
        "fallback": {**GEMINI_LOCATION, "description": "A place to search."},
        "limit": {"minimum": 1, "type": "integer"},
    },
    "required": ["title", "pattern", "where"],
}


def keywords(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every (keyword, value) anywhere in a schema tree; the names under `properties` are not keywords."""
    if isinstance(schema, list):
        for item in schema:
            yield from keywords(item)
    elif isinstance(schema, dict):
        for key, value in schema.items():
            yield key, value
            children = value.values() if key == "properties" and isinstance(value, dict) else [value]
            for child in children:
                yield from keywords(child)


# --- a nested model with Optional fields ----------------------------------------------------------


def test_openai_gets_refs_inlined_and_titles_dropped() -> None:
    assert normalize_schema(SearchArgs.model_json_schema(), "openai") == SEARCH_ARGS


def test_anthropic_gets_the_object_schema_as_is_after_inlining() -> None:
    assert normalize_schema(SearchArgs.model_json_schema(), "anthropic") == SEARCH_ARGS


def test_gemini_gets_only_what_it_accepts() -> None:
    assert normalize_schema(SearchArgs.model_json_schema(), "gemini") == GEMINI_SEARCH_ARGS


def test_gemini_output_has_none_of_the_rejected_keywords_anywhere() -> None:
    output = normalize_schema(SearchArgs.model_json_schema(), "gemini")
    found = list(keywords(output))
    names = {key for key, _ in found}
    assert names.isdisjoint({"$schema", "additionalProperties", "default", "pattern", "$ref", "$defs", "title"})
    assert {value for key, value in found if key == "format"} <= {"enum", "date-time"}
    assert {"type": "null"} not in [value for _, value in found]
    # ... while properties that happen to be named like keywords survive
    assert {"title", "pattern"} <= set(output["properties"])


def test_no_dialect_keeps_refs_or_titles() -> None:
    for dialect in DIALECTS:
        names = {key for key, _ in keywords(normalize_schema(SearchArgs.model_json_schema(), dialect))}
        assert names.isdisjoint({"$ref", "$defs", "definitions", "title"}), dialect


def test_gemini_keeps_enum_and_date_time_formats_and_drops_the_others() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "choice": {"type": "string", "format": "enum", "enum": ["a", "b"]},
            "mail": {"type": "string", "format": "email"},
        },
        "$schema": "https://json-schema.org/draft/2020-12/schema",
    }
    assert normalize_schema(schema, "gemini") == {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "choice": {"type": "string", "format": "enum", "enum": ["a", "b"]},
            "mail": {"type": "string"},
        },
    }


def test_gemini_turns_nested_one_of_into_any_of_and_optional_unions_lose_only_null() -> None:
    schema = {
        "type": "object",
        "properties": {
            "target": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "description": "Who."},
        },
    }
    assert normalize_schema(schema, "gemini")["properties"] == {
        "target": {"anyOf": [{"type": "string"}, {"type": "integer"}], "description": "Who."},
    }


# --- root unions ----------------------------------------------------------------------------------


class Send(BaseModel):
    action: Literal["send"]
    text: str
    to: str | None = None


class React(BaseModel):
    action: Literal["react"]
    emoji: str
    to: str


class MessageArgs(RootModel[Annotated[Send | React, Field(discriminator="action")]]):
    pass


# Every member's properties; `action`'s consts merge into an enum; only what both require stays required.
MESSAGE_ARGS = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["send", "react"]},
        "text": {"type": "string"},
        "to": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "emoji": {"type": "string"},
    },
    "required": ["action"],
}


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_a_root_union_of_objects_is_flattened_into_one_object(dialect: SchemaDialect) -> None:
    schema = MessageArgs.model_json_schema()
    assert "oneOf" in schema and "discriminator" in schema
    assert normalize_schema(schema, dialect) == MESSAGE_ARGS


def test_a_root_union_for_gemini_is_flattened_and_cleaned() -> None:
    assert normalize_schema(MessageArgs.model_json_schema(), "gemini") == {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["send", "react"]},
            "text": {"type": "string"},
            "to": {"type": "string"},
            "emoji": {"type": "string"},
        },
        "required": ["action"],
    }


def test_a_root_all_of_adds_up_its_members() -> None:
    schema = {
        "description": "Both parts.",
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ],
    }
    assert normalize_schema(schema, "openai") == {
        "type": "object",
        "description": "Both parts.",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }


def test_conflicting_property_types_across_union_members_become_any_of() -> None:
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        ]
    }
    assert normalize_schema(schema, "openai") == {
        "type": "object",
        "properties": {"id": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
        "required": ["id"],
    }


# --- the object root ------------------------------------------------------------------------------


def test_a_root_without_type_or_properties_becomes_an_object() -> None:
    assert normalize_schema({"properties": {"x": {"type": "string"}}}, "openai") == {
        "type": "object",
        "properties": {"x": {"type": "string"}},
    }
    assert normalize_schema({"type": "object"}, "gemini") == {"type": "object", "properties": {}}


def test_a_root_that_is_not_an_object_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be an object schema, not 'string'"):
        normalize_schema({"type": "string"}, "openai")


def test_an_unknown_dialect_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown schema dialect 'cohere'"):
        normalize_schema({"type": "object"}, "cohere")  # type: ignore[arg-type]


def test_an_unresolvable_ref_is_rejected() -> None:
    with pytest.raises(ValueError, match="unresolvable \\$ref '#/\\$defs/Missing'"):
        normalize_schema({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}}, "openai")


# --- recursive models -----------------------------------------------------------------------------


class Node(BaseModel):
    """A tree node."""

    name: str
    children: list[Node] = []
    parent: Node | None = None


def test_a_recursive_model_is_inlined_once_and_its_self_reference_becomes_its_bare_type() -> None:
    stub = {"type": "object", "description": "A tree node."}
    assert normalize_schema(Node.model_json_schema(), "openai") == {
        "type": "object",
        "description": "A tree node.",
        "properties": {
            "name": {"type": "string"},
            "children": {"default": [], "items": stub, "type": "array"},
            "parent": {"anyOf": [stub, {"type": "null"}], "default": None},
        },
        "required": ["name"],
    }
    assert normalize_schema(Node.model_json_schema(), "gemini")["properties"]["parent"] == stub


def test_mutually_recursive_definitions_terminate() -> None:
    schema = {
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
        },
        "$ref": "#/$defs/A",
    }
    assert normalize_schema(schema, "anthropic") == {
        "type": "object",
        "properties": {"b": {"type": "object", "properties": {"a": {"type": "object"}}}},
    }


# --- the input is left alone ----------------------------------------------------------------------


@pytest.mark.parametrize("model", [SearchArgs, MessageArgs, Node])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_input_schema_is_never_mutated(model: type[BaseModel], dialect: SchemaDialect) -> None:
    schema = model.model_json_schema()
    before = copy.deepcopy(schema)
    output = normalize_schema(schema, dialect)
    assert schema == before
    # ... nor shared: changing the output leaves the input as it was.
    for _, value in list(keywords(output)):
        if isinstance(value, dict):
            value.clear()
        elif isinstance(value, list):
            value.append("changed")
    assert schema == before


# --- tools ----------------------------------------------------------------------------------------


class Search(Tool):
    name = "search"
    description = "Search files."
    parameters = SearchArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        return json_result([])


def test_tool_schema_renders_a_tool_for_each_dialect() -> None:
    assert tool_schema(Search(), "openai") == SEARCH_ARGS
    assert tool_schema(Search(), "gemini") == GEMINI_SEARCH_ARGS
