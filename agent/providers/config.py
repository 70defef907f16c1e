"""Provider settings from bindings.yaml (or the environment), `provider/model` names, and building a Provider."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from agent.keys import needs_key
from agent.providers.base import ThinkingLevel

if TYPE_CHECKING:
    import httpx

    from agent.providers.base import Provider

_URL = re.compile(r"^https?://[^/\s]+", re.IGNORECASE)
# Model families that take images, by name: OpenAI's GPT-4o, 4.1, 5 and o-series, Claude, Gemini, Llama 4 and the
# open vision models (LLaVA, Qwen-VL, Pixtral, anything named "vision" or "-vl").
_SEES = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-5|(^|/)o[134](-|$)|claude|gemini|llava|vision|[-_]vl\b|vl[-_:]|pixtral"
    r"|llama-4|gemma-3|mistral-(small|medium)-3",
    re.IGNORECASE,
)


THINKING_LEVELS: tuple[ThinkingLevel, ...] = ("off", "low", "medium", "high")


def http_url(value: str) -> str:
    """`value` as an endpoint's base URL (no trailing slash); ValueError unless it is http(s)."""
    url = value.strip()
    if not _URL.match(url):
        raise ValueError("must be an http:// or https:// URL, e.g. https://openrouter.ai/api/v1")
    return url.rstrip("/")


def _lower(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _blank_is_none(value: object) -> object:
    # `api_key: ${OPENAI_API_KEY:-}` with the variable unset reads as "": no key, not an empty one.
    if isinstance(value, str) and not value.strip():
        return None
    return value.strip() if isinstance(value, str) else value


def _key_list(value: object) -> object:
    # One env variable may carry several keys: `api_keys: ${OPENROUTER_API_KEYS}` with "k1,k2".
    if isinstance(value, str):
        return [part for part in re.split(r"[,\s]+", value) if part]
    if isinstance(value, list):
        return [item.strip() if isinstance(item, str) else item for item in value if item != ""]
    return value


class ModelPrice(BaseModel):
    """What a model costs, in US dollars per million tokens; cache reads and writes cost what input does unless set."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="US dollars per million input (prompt) tokens that are not cached.")
    output: float = Field(ge=0, description="US dollars per million output tokens.")
    cache_read: float | None = Field(
        default=None, ge=0, description="US dollars per million tokens read from the prompt cache; none: `input`'s."
    )
    cache_write: float | None = Field(
        default=None, ge=0, description="US dollars per million tokens written to the prompt cache; none: `input`'s."
    )

    def cost(self, input_tokens: int, output_tokens: int, cache_read_tokens: int, cache_write_tokens: int) -> float:
        """Dollars for one run's tokens; `input_tokens` is the whole prompt, cache reads and writes included."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        uncached = max(input_tokens - cache_read_tokens - cache_write_tokens, 0)
        total = uncached * self.input + output_tokens * self.output + cache_read_tokens * read
        return (total + cache_write_tokens * write) / 1_000_000


class ModelOptions(BaseModel):
    """Settings for one model id of a provider (the key is the part after `provider/`)."""

    model_config = ConfigDict(extra="forbid")

    tool_dispatch: Annotated[Literal["native", "xml"], BeforeValidator(_lower)] = Field(
        default="native",
        description="`native`: the provider's tool calling; `xml`, for models without it: the tools are described in "
        "the prompt and the model answers with `<tool_call>` tags.",
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="The most tokens one answer of this model may have; none: the request's (4096)."
    )
    thinking: Annotated[ThinkingLevel, BeforeValidator(_lower)] = Field(
        default="off",
        description="Reasoning effort (OpenAI's `reasoning_effort`, Anthropic's extended thinking): `off`, `low`, "
        "`medium` or `high`; lowered a level when the model rejects it; `/think` changes it for one conversation.",
    )
    input: list[Annotated[Literal["text", "image"], BeforeValidator(_lower)]] | None = Field(
        default=None,
        description="What the model takes in: `[text]`, or `[text, image]` for one that is shown images; none: "
        "guessed from the model's name.",
    )
    price: ModelPrice | None = Field(
        default=None,
        description="What the model costs, for `/usage`'s estimate; none: no price known (`/usage` names the model).",
    )


class ProviderConfig(BaseModel):
    """One LLM endpoint. Keys are optional: local servers (Ollama, llama.cpp) need none, and then none is sent."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[str, BeforeValidator(_lower)] = Field(
        description="Which plugin speaks to it (entry point group `switchboard.providers`): `openai`, any Chat "
        "Completions endpoint (OpenRouter, OpenAI, Ollama, vLLM, llama.cpp, LM Studio), and `anthropic`, the "
        "Messages API, are built in."
    )
    base_url: str = Field(
        description="The endpoint's root with its scheme: `openai` posts to `{base_url}/chat/completions`, "
        "`anthropic` to `{base_url}/v1/messages`."
    )
    api_key: Annotated[str | None, BeforeValidator(_blank_is_none)] = Field(
        default=None,
        description="The key, written as `${VAR}`; none (and no `api_keys`): no auth header is sent, as local servers "
        "need.",
    )
    api_keys: Annotated[list[str], BeforeValidator(_key_list)] = Field(
        default_factory=list,
        description="More keys, tried after `api_key` in order: a refused key cools down for an hour, a rate-limited "
        "one for its Retry-After, and the next is used.",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="Headers added to every request.")
    timeout_seconds: float = Field(
        default=120,
        gt=0,
        description="The longest, in seconds, the endpoint may stay silent: connecting, or between two pieces of "
        "the stream.",
    )
    cache: Annotated[Literal["auto", "off"], BeforeValidator(_lower)] = Field(
        default="auto",
        description="Prompt-cache breakpoints: `auto` marks them where the endpoint needs them (Anthropic; Claude "
        "and Gemini models behind OpenAI-compatible endpoints such as OpenRouter); `off` never sends any.",
    )
    models: dict[str, ModelOptions] = Field(
        default_factory=dict,
        description="Settings per model, keyed by the model id (what follows `<provider>/`); a model not listed gets "
        "the defaults.",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value)

    def keys(self) -> list[str]:
        """Every configured key, `api_key` first, without duplicates."""
        ordered = [self.api_key, *self.api_keys] if self.api_key else list(self.api_keys)
        return list(dict.fromkeys(ordered))

    def wants_key(self) -> bool:
        """Whether requests need an API key: yes for a server elsewhere, no for one on this machine or the local
        network (agent.keys.needs_key); a provider kind that contacts nothing says no."""
        return needs_key(self.base_url)

    def model_options(self, model: str) -> ModelOptions:
        """The settings for `model` (the provider's own id), defaults when it has none."""
        return self.models.get(model) or ModelOptions()


def split_model(name: str) -> tuple[str, str]:
    """Split a model name at its first "/": `openrouter/anthropic/claude-sonnet-4` -> `(openrouter, anthropic/...)`."""
    provider, sep, model = name.strip().partition("/")
    if not sep or not provider.strip() or not model.strip():
        raise ValueError(
            f"model {name!r} must be written as <provider>/<model-id>, e.g. openrouter/anthropic/claude-sonnet-4"
        )
    return provider.strip(), model.strip()


# (env variable with the key, provider name, kind, default base URL, env variable that may override the URL)
_ENV_PROVIDERS: tuple[tuple[str, str, Literal["openai", "anthropic"], str, str | None], ...] = (
    ("OPENROUTER_API_KEY", "openrouter", "openai", "https://openrouter.ai/api/v1", None),
    ("OPENAI_API_KEY", "openai", "openai", "https://api.openai.com/v1", "OPENAI_BASE_URL"),
    ("ANTHROPIC_API_KEY", "anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_BASE_URL"),
)


def providers_from_env(environ: Mapping[str, str]) -> dict[str, ProviderConfig]:
    """The providers implied by well-known key variables, for a bindings.yaml without a `providers` section."""
    found: dict[str, ProviderConfig] = {}
    for key_var, name, kind, default_url, url_var in _ENV_PROVIDERS:
        key = environ.get(key_var, "").strip()
        if not key:
            continue
        base_url = (environ.get(url_var, "").strip() if url_var else "") or default_url
        found[name] = ProviderConfig(kind=kind, base_url=base_url, api_key=key)
    return found


@dataclass(frozen=True)
class ProviderPlugin:
    """A kind of LLM endpoint as a plugin (entry point group `switchboard.providers`, named for the kind): its
    settings model (ProviderConfig or a subclass with keys of its own) and how to build its Provider."""

    settings: type[ProviderConfig]
    create: Callable[[str, Any, httpx.AsyncClient | None], Provider]


def sees_images(model_id: str, options: ModelOptions) -> tuple[bool, str]:
    """Whether the model is shown images, and why: its `input` setting, else a guess from its name."""
    if options.input is not None:
        return "image" in options.input, "its input setting"
    return bool(_SEES.search(model_id)), "the default for its name (set input: [text, image] to change it)"
