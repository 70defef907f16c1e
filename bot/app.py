"""The application, built once from a Config: its plugins, tools, hooks, runner, run decisions and channel adapters.
`bot run`, `bot chat`, `bot prompt` and `bot tools` all use it; a Python program builds one with tools, hooks,
channels and providers of its own and runs it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.providers.base import Provider
from agent.providers.builtins import build_provider
from agent.providers.config import ProviderConfig
from agent.runner import Runner
from bot.config.checks import bot_folders
from bot.config.settings import Config
from bot.gateway.adapters import build_adapters, web_adapters
from bot.plugins import Plugins
from bot.runs.assemble import policy_for
from bot.runs.decisions import Decisions
from channels.base import ChannelAdapter, Principal
from routing import Peer
from tools.base import Tool
from tools.builtins import NoChats, nobody_to_ask
from tools.exec import ProcessTable
from tools.hooks import Hooks
from tools.mcp.manager import McpManager
from tools.policy import PolicyResult
from tools.registry import ToolRegistry, ToolSetup
from tools.skills import SkillReport

if TYPE_CHECKING:
    import httpx

    from bot.gateway.process import Gateway

__all__ = ["App"]


class App:
    """Everything runs share, from one Config. The plugins are the installed ones (entry points) plus `plugins`;
    `tools` are added to the plugins' tools, `adapters` to the adapters the config's accounts get.

        app = App(load_config("bindings.yaml"), Path("state"), tools=[MyTool()])
        async with app.running() as gateway:
            ...  # serving every configured channel until the block ends
    """

    def __init__(
        self,
        config: Config,
        state_dir: Path | None = None,
        *,
        plugins: Plugins | None = None,
        tools: Sequence[Tool] = (),
        hooks: Hooks | None = None,
        adapters: Sequence[ChannelAdapter] = (),
        runner: Runner | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state_dir = state_dir if state_dir is not None else Path.cwd() / "state"
        self.plugins = plugins or Plugins()
        self.extra_tools = list(tools)
        self.hooks = hooks or Hooks()
        self.extra_adapters = list(adapters)
        self.runner = runner or Runner(provider_factory=self.build_provider)
        self.clock = clock
        self.decisions = Decisions(config, self.state_dir)
        # The MCP servers: started by `running()` (and briefly by the commands that list tools), their tools in every
        # registry this App builds.
        base_dir = config.file.parent if config.file is not None else Path.cwd()
        hide = bot_folders(config, self.state_dir)  # every stdio server runs shielded from the bot, like a command
        self.mcp = McpManager(config.mcp.servers, base_dir=base_dir, hide=hide, unset=config.mcp_unset())

    def use(self, config: Config) -> None:
        """Decide from `config` from now on (its router, its owners): what a live reload changes."""
        self.decisions.use(config)

    @property
    def config(self) -> Config:
        """The config of the moment (a live reload replaces it)."""
        return self.decisions.config

    def build_provider(self, name: str, settings: ProviderConfig, client: httpx.AsyncClient | None = None) -> Provider:
        """The Provider for the provider `name` with `settings`, from the plugin of its kind."""
        return build_provider(name, settings, client, self.plugins.providers())

    # --- tools ------------------------------------------------------------------------------------------------------

    def registry(self, setup: ToolSetup | None = None) -> ToolRegistry:
        """The tools, each tool plugin's (the built-ins first), then the App's own, then those the MCP servers offer
        at the moment, wired to `setup`'s chats and approvals; by default to none (nothing can be sent and no command
        approved: what `bot tools` lists)."""
        setup = setup or ToolSetup(NoChats(), nobody_to_ask, ProcessTable())
        registry = ToolRegistry()
        for _, factory in self.plugins.tool_factories():
            for tool in factory(setup):
                registry.register(tool)
        for tool in self.extra_tools:
            registry.register(tool)
        self.mcp.reserve(registry.names())  # an MCP tool whose name is taken is reported, never shadows one of these
        registry.attach(self.mcp)  # the MCP servers' tools of the moment, as each run's tools are chosen
        return registry

    # --- who a run is for (bot.runs.decisions) ---------------------------------------------------------------------

    def skills(self, agent: str) -> SkillReport:
        """The agent's skills, each offered or with why not (`bot skills list`, `/skill`). Reads folders: call it
        off the event loop."""
        return self.decisions.skills(agent)

    def policy(self, agent: str, channel: str, *, peer: Peer | None = None, owner: bool = True) -> PolicyResult:
        """The tools a run of `agent` on `channel` may use, and why each other tool was left out (`bot tools`)."""
        run = self.decisions.run_info(
            agent, "-", channel=channel, principal=Principal(owner=owner), peer_kind=peer.kind if peer else None,
            model=self.decisions.first_model(agent),
        )  # fmt: skip
        return policy_for(self.config, self.registry(), run, peer=peer)

    # --- serving ----------------------------------------------------------------------------------------------------

    def adapters(self) -> tuple[list[ChannelAdapter], list[str]]:
        """The adapters to serve (the config's accounts, each built by its channel's plugin, the WebChat accounts, then
        the App's own),
        and one line for each account that was skipped and why."""
        built, skipped = build_adapters(self.config, self.plugins)
        return [*built, *web_adapters(self.config, self.state_dir), *self.extra_adapters], skipped

    @contextlib.asynccontextmanager
    async def running(
        self, adapters: Sequence[ChannelAdapter] | None = None, *, grace_seconds: float | None = None
    ) -> AsyncIterator[Gateway]:
        """Serve `adapters` (default: `adapters()`) until the block ends: the state is opened, the MCP servers
        started in the background (none delays the channels), the gateway started, and at the end stopped (runs get
        `grace_seconds` to finish, by default the config's `lanes.stop_grace` as it is then) and everything
        closed."""
        from bot.gateway.process import Gateway
        from bot.gateway.state import open_state

        if adapters is None:
            adapters = self.adapters()[0]
        self.state_dir.mkdir(parents=True, exist_ok=True)  # status.json and the transcripts, whatever the backend
        store = await open_state(self.config, self.state_dir, clock=self.clock)
        try:
            async with self.mcp.running():
                gateway = Gateway(self, store, adapters)
                await gateway.start()
                try:
                    yield gateway
                finally:
                    await gateway.stop(self.config.lanes.stop_grace if grace_seconds is None else grace_seconds)
        finally:
            await store.close()
