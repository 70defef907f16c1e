"""`mcp.servers.<name>` in bindings.yaml: how to reach one MCP server (a command on stdio, or a URL), which of its
tools to offer, how long a call may take, and which agents may use it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from routing import normalize_agent_id

__all__ = ["McpServerSettings", "McpSettings", "Transport", "secret_entries"]

Transport = Literal["stdio", "streamable-http", "sse"]
MAX_SERVER_NAME = 32
# Lowercase, so that `mcp:<server>` is a group a policy can name; no `__`, the separator in `<server>__<tool>`.
_SERVER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]|_(?!_))*$")
# Keys whose values are credentials: written literally they draw a warning, and the logs never show them.
_SECRET_ENV = re.compile(r"(TOKEN|KEY|KEYS|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
_SECRET_HEADER = re.compile(r"^(authorization|proxy-authorization|cookie)$|token|key|secret|password", re.IGNORECASE)


def _server_name(value: object) -> object:
    if not isinstance(value, str):
        return value
    if len(value) > MAX_SERVER_NAME or not _SERVER_NAME.match(value) or value.endswith("_"):
        raise ValueError(
            f"an MCP server's name must be lowercase letters, digits, - or _ (never two _ in a row, nor one at the "
            f"end), at most {MAX_SERVER_NAME} characters: it starts the names of its tools, <server>__<tool>"
        )
    return value


def _text(value: object) -> object:
    """An environment or header value written as a number or true/false is meant as its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


def _agent(value: object) -> object:
    return normalize_agent_id(value.strip()) if isinstance(value, str) else value


def _http_url(value: object) -> object:
    if not isinstance(value, str):
        return value
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return value.strip()


ServerName = Annotated[str, BeforeValidator(_server_name)]
Text = Annotated[str, BeforeValidator(_text)]
AgentId = Annotated[str, BeforeValidator(_agent)]
Url = Annotated[str, BeforeValidator(_http_url)]

_STDIO_KEYS = ("args", "env", "cwd")
_REMOTE_KEYS = ("headers", "transport")


class _Section(BaseModel):
    """A mapping of settings whose keys are all known; a key left empty (its entries commented out) is not written."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _without_empty_keys(cls, data: Any) -> Any:
        return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


class McpServerSettings(_Section):
    """One MCP server: `command` (stdio) or `url` (streamable HTTP, or SSE for old servers), its tool filters,
    the time limit of each call, and the agents that may use it."""

    command: str | None = Field(
        default=None,
        description="Stdio: the program started (with `args`, in `cwd`, with an environment of `env` alone) and "
        "spoken to on its stdin and stdout; give it or `url`, not both.",
    )
    args: list[Text] = Field(default_factory=list, description="Stdio: the program's arguments.")
    env: dict[str, Text] = Field(
        default_factory=dict,
        description="Stdio: variables added to a minimal environment (PATH, HOME, the locale and a few more); none of "
        "the bot's secrets unless written here, as `${VAR}`.",
    )
    cwd: str | None = Field(
        default=None,
        description="Stdio: the folder the program runs in, relative to the config's folder; none: the config's "
        "folder, which it sees empty.",
    )
    url: Url | None = Field(
        default=None, description="Remote: the server's http(s) URL; give it or `command`, not both."
    )
    headers: dict[str, Text] = Field(
        default_factory=dict,
        description="Remote: headers sent with every request, such as `Authorization: Bearer ${TOKEN}`.",
    )
    transport: Literal["streamable-http", "sse"] | None = Field(
        default=None,
        description="Remote: `streamable-http`, or `sse` for old servers; none: streamable-http.",
    )
    include: list[str] = Field(
        default_factory=list,
        description="Globs on the server's own tool names: only the tools they match are offered; empty: every tool.",
    )
    exclude: list[str] = Field(
        default_factory=list, description="Globs on the server's own tool names, left out after `include`."
    )
    timeout_seconds: float = Field(
        default=60,
        gt=0,
        description="Seconds one tool call may take; past it the call is cancelled on the server.",
    )
    startup_timeout_seconds: float = Field(
        default=30,
        gt=0,
        description="Seconds each of connecting, the handshake and a tool listing may take before the server counts "
        "as failed to start (it is tried again later).",
    )
    agents: list[AgentId] | None = Field(
        default=None, description="The agents whose runs may use its tools; none: every agent."
    )

    @model_validator(mode="after")
    def _one_way_to_reach_it(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a program spoken to on stdio) or url (a remote server), not both")
        if self.command is not None and not self.command.strip():
            raise ValueError("command must not be empty")
        written = self.model_fields_set
        wrong = _REMOTE_KEYS if self.command is not None else _STDIO_KEYS
        misplaced = [key for key in wrong if key in written]
        if misplaced:
            kind = "a stdio server (command)" if self.command is not None else "a remote server (url)"
            raise ValueError(f"{', '.join(misplaced)} cannot be set for {kind}")
        return self

    @property
    def kind(self) -> Transport:
        """How the server is spoken to."""
        if self.command is not None:
            return "stdio"
        return self.transport or "streamable-http"

    @property
    def where(self) -> str:
        """The command line or URL, for listings (never the environment or headers)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return f"{self.url} ({self.kind})"

    def secret_values(self) -> list[str]:
        """Every value of its environment and headers: what its error messages must never repeat."""
        return [value for value in (*self.env.values(), *self.headers.values()) if value]


class McpSettings(_Section):
    """The `mcp:` section: the servers by name."""

    servers: dict[ServerName, McpServerSettings] = Field(
        default_factory=dict,
        description="The MCP servers by name (lowercase letters, digits, `-` and `_`, at most 32): the name starts "
        "their tools' names, `<server>__<tool>`, and is the group `mcp:<server>`.",
    )


def secret_entries(data: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(key path under `mcp`, value) of every credential-looking environment variable or header in a raw `mcp:`
    section, such as `servers.github.env.GITHUB_TOKEN` or `servers.search.headers.Authorization`."""
    servers = data.get("servers") if isinstance(data, dict) else None
    for name, server in servers.items() if isinstance(servers, dict) else ():
        if not isinstance(server, dict):
            continue
        for section, pattern in (("env", _SECRET_ENV), ("headers", _SECRET_HEADER)):
            entries = server.get(section)
            for key, value in entries.items() if isinstance(entries, dict) else ():
                if isinstance(key, str) and pattern.search(key) and value not in (None, ""):
                    yield ("servers", str(name), section, key), value
