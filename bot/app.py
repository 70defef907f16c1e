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
from agent.providers.config import ProviderConfig, build_provider
from agent.runner import Runner
from bot.access import owner_key
from bot.adapters import build_adapters
from bot.assemble import SetupError, model_refs, policy_for, skill_report
from bot.config import Config, bot_folders, own_files
from bot.plugins import Plugins
from channels.base import Capabilities, ChannelAdapter, ChatTarget, Principal
from routing import Peer
from tools.base import RunInfo, Tool
from tools.builtins import NoChats, nobody_to_ask
from tools.exec import ProcessTable
from tools.hooks import Hooks
from tools.mcp.manager import McpManager
from tools.policy import PolicyResult
from tools.provenance import person_workspace
from tools.registry import ToolRegistry, ToolSetup
from tools.sandbox import sandbox_for
from tools.skills import SkillReport

if TYPE_CHECKING:
    import httpx

    from bot.gateway import Gateway

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
        self.use(config)
        # The MCP servers: started by `running()` (and briefly by the commands that list tools), their tools in every
        # registry this App builds.
        base_dir = config.file.parent if config.file is not None else Path.cwd()
        hide = bot_folders(config, self.state_dir)  # every stdio server runs shielded from the bot, like a command
        self.mcp = McpManager(config.mcp.servers, base_dir=base_dir, hide=hide, unset=config.mcp_unset())

    def use(self, config: Config) -> None:
        """Decide from `config` from now on (its router, its owners): what a live reload changes."""
        self.config = config
        self.router = config.router()
        self.owners = frozenset(  # owner_key of each of the config's `owners`
            owner_key(*owner.split(":", 1)) for owner in config.owners
        )

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

    # --- who a run is for -------------------------------------------------------------------------------------------

    def owns(self, channel: str, sender_id: str | None) -> bool:
        """Whether this sender on this channel is one of the config's owners."""
        return sender_id is not None and owner_key(channel, sender_id) in self.owners

    def run_info(
        self,
        agent: str,
        session_key: str,
        *,
        channel: str,
        principal: Principal,
        peer_kind: str | None = "direct",
        sender_id: str | None = None,
        sender_name: str | None = None,
        capabilities: Capabilities | None = None,
        target: ChatTarget | None = None,
        reply_to: str | None = None,
        model: str | None = None,
        turn: str | None = None,
        depth: int = 0,
        hops: int = 0,
    ) -> RunInfo:
        """What a run acting for `principal` (bot.principal decides it) may do, decided in one place for every entry
        point: its sandbox, its workspace (a non-owner's own folder under `memory.scope: sender`; one for nobody in
        particular when it acts for no one person), whether it may act in other chats (a subagent, `depth` levels
        below the session it works for, never may)."""
        settings = self.config.agent(agent)
        workspace = self.config.workspace(agent)
        owner = principal.owner
        scoped = not owner and settings.memory.scope == "sender"
        home = person_workspace(workspace, principal.person) if scoped else workspace
        return RunInfo(
            agent=agent,
            session_key=session_key,
            channel=channel,
            sender_id=sender_id,
            sender_name=sender_name,
            sender_is_owner=owner,
            person=principal.person,
            workspace=str(home),
            agent_workspace=str(workspace),
            target=target,
            reply_to=reply_to,
            model=model,
            turn=turn,
            sandbox=sandbox_for(settings.sandbox, channel=channel, is_owner=owner, peer_kind=peer_kind),
            cross_chat="none" if depth else settings.message.cross_chat,
            timezone=self.config.timezone_for(agent),
            depth=depth,
            hops=hops,
            **({"capabilities": capabilities} if capabilities is not None else {}),
        )

    def skills(self, agent: str) -> SkillReport:
        """The agent's skills, each offered or with why not (`bot skills list`, `/skill`). Reads folders: call it
        off the event loop."""
        return skill_report(self.config, agent, own_files(self.config, self.state_dir))

    def first_model(self, agent: str) -> str | None:
        """The agent's model (`provider/model-id`), None when none is configured."""
        try:
            return model_refs(self.config, agent)[0]
        except SetupError:
            return None

    def policy(self, agent: str, channel: str, *, peer: Peer | None = None, owner: bool = True) -> PolicyResult:
        """The tools a run of `agent` on `channel` may use, and why each other tool was left out (`bot tools`)."""
        run = self.run_info(
            agent, "-", channel=channel, principal=Principal(owner=owner), peer_kind=peer.kind if peer else None,
            model=self.first_model(agent),
        )  # fmt: skip
        return policy_for(self.config, self.registry(), run, peer=peer)

    # --- serving ----------------------------------------------------------------------------------------------------

    def adapters(self) -> tuple[list[ChannelAdapter], list[str]]:
        """The adapters to serve (the config's accounts, each built by its channel's plugin, then the App's own),
        and one line for each account that was skipped and why."""
        built, skipped = build_adapters(self.config, self.plugins)
        return [*built, *self.extra_adapters], skipped

    @contextlib.asynccontextmanager
    async def running(
        self, adapters: Sequence[ChannelAdapter] | None = None, *, grace_seconds: float | None = None
    ) -> AsyncIterator[Gateway]:
        """Serve `adapters` (default: `adapters()`) until the block ends: the state is opened, the MCP servers
        started in the background (none delays the channels), the gateway started, and at the end stopped (runs get
        `grace_seconds` to finish, by default the config's `lanes.stop_grace` as it is then) and everything
        closed."""
        from bot.gateway import Gateway
        from bot.state import open_state

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
