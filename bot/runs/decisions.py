"""The live view every part of the message path reads at each use: the config, its router and owners (a live reload
swaps all three at once), and what a run acting for someone may do, decided in one place."""

from __future__ import annotations

from pathlib import Path

from bot.config.checks import own_files
from bot.config.owners_file import owner_key
from bot.config.settings import Config
from bot.runs.assemble import SetupError, model_refs, skill_report
from channels.base import Capabilities, ChatTarget, Principal
from tools.base import RunInfo
from tools.provenance import person_workspace
from tools.sandbox import sandbox_for
from tools.skills import SkillReport

__all__ = ["Decisions"]


class Decisions:
    """The config of the moment (`use` replaces it), its router and its owners, and the decisions made from them."""

    def __init__(self, config: Config, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.use(config)

    def use(self, config: Config) -> None:
        """Decide from `config` from now on (its router, its owners): what a live reload changes."""
        self.config = config
        self.router = config.router()
        self.owners = frozenset(  # owner_key of each owner: the config's `owners` and its web logins that are
            owner_key(*owner.split(":", 1)) for owner in config.owner_keys()
        )

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
        """What a run acting for `principal` (see bot.runs.principal) may do, decided in one place for every entry
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
