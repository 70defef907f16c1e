"""The text `bot init` writes: a commented bindings.yaml for the chosen platforms and model provider, every secret a
${VAR} reference, the platforms not chosen as commented blocks that are valid YAML once uncommented."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMPATIBLE", "PLATFORMS", "PROVIDERS", "Platform", "ProviderChoice", "compatible", "render_config"]

COMPATIBLE = "openai-compatible"  # --provider for any Chat Completions endpoint (a local server, a gateway)


@dataclass(frozen=True)
class Platform:
    """A chat platform `bot init` can set up: its account settings as written, the variables they read, where its
    API is, and how to get a token."""

    name: str
    title: str
    account: str  # the account's settings, in YAML flow style, without the braces
    variables: tuple[str, ...]  # the first is the token that is checked
    base_url: str
    how: str


@dataclass(frozen=True)
class ProviderChoice:
    """A model provider as `bot init` writes it: its name in model ids, kind, endpoint, key variable and models."""

    name: str
    kind: str
    base_url: str
    variable: str
    model: str
    fallbacks: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return {"openrouter": "OpenRouter", "openai": "OpenAI", "anthropic": "Anthropic"}.get(self.name, self.name)


PLATFORMS: dict[str, Platform] = {
    "telegram": Platform(
        "telegram", "Telegram", 'token: "${TELEGRAM_BOT_TOKEN}"', ("TELEGRAM_BOT_TOKEN",),
        "https://api.telegram.org", "talk to @BotFather on Telegram: /newbot gives the token",
    ),
    "discord": Platform(
        "discord", "Discord", 'token: "${DISCORD_BOT_TOKEN}"', ("DISCORD_BOT_TOKEN",),
        "https://discord.com", "Developer Portal > your application > Bot > Reset Token (enable Message Content)",
    ),
    "slack": Platform(
        "slack", "Slack", 'bot_token: "${SLACK_BOT_TOKEN}", app_token: "${SLACK_APP_TOKEN}"',
        ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"), "https://slack.com",
        "api.slack.com/apps > your app: OAuth (xoxb- bot token) and Socket Mode (xapp- app token)",
    ),
}  # fmt: skip

PROVIDERS: dict[str, ProviderChoice] = {
    "openrouter": ProviderChoice(
        "openrouter", "openai", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY",
        "openrouter/anthropic/claude-sonnet-4", ("openrouter/openai/gpt-4.1-mini",),
    ),
    "openai": ProviderChoice(
        "openai", "openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "openai/gpt-4.1", ("openai/gpt-4.1-mini",)
    ),
    "anthropic": ProviderChoice("anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY",
                          "anthropic/claude-sonnet-4"),
}  # fmt: skip


def compatible(base_url: str, model: str) -> ProviderChoice:
    """An OpenAI-compatible endpoint: named `local` on this machine or the local network (it needs no key), `custom`
    elsewhere; `model` is the id the server knows (`llama3.1`), or already `<name>/<id>`."""
    from agent.keys import key_variable, needs_key  # here: `bot --help` loads this module

    name = "custom" if needs_key(base_url) else "local"
    ref = model if model.startswith(f"{name}/") else f"{name}/{model}"
    return ProviderChoice(name, "openai", base_url.rstrip("/"), key_variable(name), ref)


def _channel(platform: Platform, api_base_url: str | None, *, commented: bool) -> list[str]:
    settings = platform.account + (f', api_base_url: "{api_base_url}"' if api_base_url else "")
    block = [
        f"{platform.name}:".ljust(34) + f"# {platform.how}",
        "  accounts:",
        f"    default: {{ {settings} }}",
    ]
    mark = "# " if commented else ""
    return [f"  {mark}{line}" for line in block]


def render_config(
    platforms: list[str],
    provider: ProviderChoice,
    model: str | None,
    owners: list[str],
    api_base_url: str | None = None,
) -> str:
    """The bindings.yaml text: commented, every secret a ${VAR} reference; `api_base_url` is written into the chosen
    platforms' accounts (a local Bot API server, a proxy, a test's fake)."""
    model = model or provider.model
    fallbacks = [ref for ref in provider.fallbacks if ref != model] if model == provider.model else []
    lines = [
        "# Switchboard's config, written by `bot init`. `bot config check` validates it; the docs' config reference",
        "# describes every key (bindings.example.yaml in the repository shows every section).",
        "#",
        "# Secrets stay out of this file: ${VAR} reads one from the environment or from .env beside this file (an",
        "# unset variable skips the account that needs it).",
        "",
        "defaults:",
        f"  model: {model}   # <provider>/<model-id>",
        f"  fallbacks: [{', '.join(fallbacks)}]   # tried in order when the model fails",
        "  workspace_root: workspaces        # each agent's files: workspaces/<agent id>",
        "",
        "# One agent answers every chat; add more and route them with bindings: (see the docs).",
        "agents:",
        "  - id: main",
        "    default: true",
        "",
        "# Who owns the bot (<channel>:<user id>): owners use every tool and approve risky commands. Send /whoami to",
        "# the bot for your id, then `bot owners add <channel>:<id>`. Strangers who write to the bot get a pairing",
        "# code; `bot pairing approve <channel> <code>` lets them in.",
    ]
    if owners:
        lines += ["owners:", *(f'  - "{owner}"' for owner in owners)]
    else:
        lines += ["owners: []"]
    lines += [
        "",
        "# Chat platforms, one account each; `bot run` serves them (with none, the console in the terminal).",
        "# To add one, uncomment its block (each line's leading '# ') and set its variables.",
        "channels:",
    ]
    for name, platform in PLATFORMS.items():
        chosen = name in platforms
        lines += _channel(platform, api_base_url if chosen else None, commented=not chosen)
    key = f"${{{provider.variable}:-}}"
    lines += [
        "",
        "# The model provider: model ids name it first (openrouter/anthropic/claude-sonnet-4).",
        "providers:",
        f"  {provider.name}:",
        f"    kind: {provider.kind}",
        f"    base_url: {provider.base_url}",
        f"    api_key: {key}" + ("   # a server on this machine needs none" if provider.name == "local" else ""),
        "",
    ]
    return "\n".join(lines)
