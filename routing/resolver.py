"""Bindings and the resolver: an index built once, then a handful of dict lookups per message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from routing.session_keys import DmScope, session_key
from routing.types import (
    DEFAULT_ACCOUNT,
    Peer,
    Route,
    RoutingInput,
    normalize_account,
    normalize_agent_id,
    normalize_channel,
    normalize_id,
)

ANY = "*"

# Tier names double as `Route.matched_by`, listed from most to least specific.
TIERS = (
    "binding.peer",
    "binding.peer.parent",
    "binding.peer.wildcard",
    "binding.guild+roles",
    "binding.guild",
    "binding.team",
    "binding.account",
    "binding.channel",
    "default",
)


def binding_tier(
    *, account: str | None, peer: Peer | None, guild: str | None, team: str | None, roles: Sequence[str] | None
) -> str:
    """The tier a binding belongs to (its most specific field); ValueError for combinations that never match."""
    if roles and guild is None:
        raise ValueError("roles needs guild: member roles only exist inside a Discord guild")
    if guild is not None and team is not None:
        raise ValueError("guild and team cannot both be set: no message has both (guild is Discord, team is Slack)")
    if peer is not None and peer.id is None:
        raise ValueError('peer needs an id (or "*" for any peer of that kind)')
    if peer is not None:
        return "binding.peer.wildcard" if peer.id == ANY else "binding.peer"
    if guild is not None:
        return "binding.guild+roles" if roles else "binding.guild"
    if team is not None:
        return "binding.team"
    return "binding.channel" if account == ANY else "binding.account"


@dataclass(frozen=True, slots=True)
class Binding:
    """One routing rule: messages matching every field it sets go to `agent`.

    `account=None` matches only the `default` account; `account="*"` matches any; `peer.id="*"`
    matches any peer of that kind; `roles` (with `guild`) needs at least one of the member's roles.
    """

    agent: str
    channel: str
    account: str | None = None
    peer: Peer | None = None
    guild: str | None = None
    team: str | None = None
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent", normalize_agent_id(self.agent))
        object.__setattr__(self, "channel", normalize_channel(self.channel))
        if self.account != ANY:
            object.__setattr__(self, "account", normalize_account(self.account))
        object.__setattr__(self, "guild", normalize_id(self.guild))
        object.__setattr__(self, "team", normalize_id(self.team))
        roles = (normalize_id(role) for role in self.roles)
        object.__setattr__(self, "roles", tuple(role for role in roles if role))
        if not self.channel:
            raise ValueError("a binding needs a channel")
        self.tier  # noqa: B018 - validates the combination of fields

    @property
    def tier(self) -> str:
        """Which tier this binding is consulted in."""
        return binding_tier(account=self.account, peer=self.peer, guild=self.guild, team=self.team, roles=self.roles)


@dataclass(frozen=True, slots=True)
class _Rule:
    """A binding as the index keeps it: lowercased ids and its position in the file."""

    order: int
    binding: Binding
    account: str
    guild: str | None
    team: str | None
    roles: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Probe:
    """The parts of an input that every rule is checked against, lowercased once per resolution."""

    account: str
    guild: str | None
    team: str | None
    roles: frozenset[str]


def _kind_class(kind: str) -> str:
    # group and channel peers match each other; neither ever matches a direct chat.
    return "direct" if kind == "direct" else "room"


def _lower(value: str | None) -> str | None:
    return value.lower() if value is not None else None


def _fits(rule: _Rule, probe: _Probe) -> bool:
    """Every field the binding sets must match (the peer was already matched by the index)."""
    return (
        (rule.account == ANY or rule.account == probe.account)
        and (rule.guild is None or rule.guild == probe.guild)
        and (rule.team is None or rule.team == probe.team)
        and (not rule.roles or not rule.roles.isdisjoint(probe.roles))
    )


def _first(rules: list[_Rule] | None, probe: _Probe) -> _Rule | None:
    if rules:
        for rule in rules:
            if _fits(rule, probe):
                return rule
    return None


class Router:
    """Resolves a `RoutingInput` to a `Route`; build once per config, then call `resolve` per message."""

    def __init__(
        self,
        bindings: Iterable[Binding] = (),
        *,
        default_agent: str = "main",
        dm_scope: DmScope = "per-channel-peer",
        identity_links: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.default_agent = normalize_agent_id(default_agent)
        self.dm_scope: DmScope = dm_scope
        self._links = {
            member.strip().lower(): canonical.strip().lower()
            for canonical, members in (identity_links or {}).items()
            for member in members
        }
        self._peer: dict[tuple[str, str, str], list[_Rule]] = {}
        self._wildcard: dict[tuple[str, str], list[_Rule]] = {}
        self._guild_role: dict[tuple[str, str, str], list[_Rule]] = {}
        self._guild: dict[tuple[str, str], list[_Rule]] = {}
        self._team: dict[tuple[str, str], list[_Rule]] = {}
        self._account: dict[tuple[str, str], list[_Rule]] = {}
        self._channel: dict[str, list[_Rule]] = {}
        for order, binding in enumerate(bindings):
            self._add(order, binding)

    def _add(self, order: int, binding: Binding) -> None:
        rule = _Rule(
            order=order,
            binding=binding,
            account=binding.account or DEFAULT_ACCOUNT,
            guild=_lower(binding.guild),
            team=_lower(binding.team),
            roles=frozenset(role.lower() for role in binding.roles),
        )
        channel, peer, tier = binding.channel, binding.peer, binding.tier
        if peer is not None:
            kind = _kind_class(peer.kind)
            if tier == "binding.peer.wildcard":
                self._wildcard.setdefault((channel, kind), []).append(rule)
            else:
                assert peer.id is not None  # binding_tier refuses a peer without id
                self._peer.setdefault((channel, kind, peer.id.lower()), []).append(rule)
        elif rule.guild is not None and rule.roles:
            for role in rule.roles:
                self._guild_role.setdefault((channel, rule.guild, role), []).append(rule)
        elif rule.guild is not None:
            self._guild.setdefault((channel, rule.guild), []).append(rule)
        elif rule.team is not None:
            self._team.setdefault((channel, rule.team), []).append(rule)
        elif rule.account == ANY:
            self._channel.setdefault(channel, []).append(rule)
        else:
            self._account.setdefault((channel, rule.account), []).append(rule)

    def match(self, source: RoutingInput) -> tuple[str, str]:
        """The agent for `source` and the tier that chose it (`matched_by`)."""
        channel = source.channel
        probe = _Probe(
            account=source.account,
            guild=_lower(source.guild),
            team=_lower(source.team),
            roles=frozenset(role.lower() for role in source.member_roles),
        )
        peer, parent = source.peer, source.parent_peer
        if peer is not None and peer.id is not None:
            hit = _first(self._peer.get((channel, _kind_class(peer.kind), peer.id.lower())), probe)
            if hit:
                return hit.binding.agent, "binding.peer"
        if parent is not None and parent.id is not None:
            hit = _first(self._peer.get((channel, _kind_class(parent.kind), parent.id.lower())), probe)
            if hit:
                return hit.binding.agent, "binding.peer.parent"
        if peer is not None:  # a peer without an id keeps its kind: a kind wildcard still matches it
            hit = _first(self._wildcard.get((channel, _kind_class(peer.kind))), probe)
            if hit:
                return hit.binding.agent, "binding.peer.wildcard"
        if probe.guild is not None:
            best: _Rule | None = None
            for role in probe.roles:
                hit = _first(self._guild_role.get((channel, probe.guild, role)), probe)
                if hit and (best is None or hit.order < best.order):
                    best = hit
            if best:
                return best.binding.agent, "binding.guild+roles"
            hit = _first(self._guild.get((channel, probe.guild)), probe)
            if hit:
                return hit.binding.agent, "binding.guild"
        if probe.team is not None:
            hit = _first(self._team.get((channel, probe.team)), probe)
            if hit:
                return hit.binding.agent, "binding.team"
        hit = _first(self._account.get((channel, probe.account)), probe)
        if hit:
            return hit.binding.agent, "binding.account"
        hit = _first(self._channel.get(channel), probe)
        if hit:
            return hit.binding.agent, "binding.channel"
        return self.default_agent, "default"

    def session_key(self, agent: str, source: RoutingInput) -> str:
        """The session key `source` gets with `agent` (for callers that choose the agent themselves)."""
        return session_key(agent, source, self.dm_scope, self._links)

    def resolve(self, source: RoutingInput) -> Route:
        """The agent, session key and matching tier for one inbound message."""
        agent, matched_by = self.match(source)
        return Route(agent=agent, session_key=self.session_key(agent, source), matched_by=matched_by)
