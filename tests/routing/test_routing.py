"""Routing resolver: normalization, binding tiers, tier precedence, file order and matching rules."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pytest

from routing import (
    TIERS,
    Binding,
    Peer,
    Route,
    Router,
    RoutingInput,
    normalize_account,
    normalize_channel,
    normalize_id,
    normalize_peer_kind,
)

# The tier order the spec promises, most specific first; `matched_by` uses these names.
TIER_ORDER = (
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
BINDING_TIERS = TIER_ORDER[:-1]
FALLBACK = "fallback"

# One Discord message that every tier's binding below matches.
EVERYTHING = RoutingInput(
    channel="discord",
    peer=Peer("channel", "X"),
    parent_peer=Peer("channel", "P"),
    guild="G",
    team="T",
    member_roles=("R",),
)

# The fields that put a Discord binding in each tier, all matching EVERYTHING.
TIER_FIELDS: dict[str, dict[str, Any]] = {
    "binding.peer": {"peer": Peer("channel", "X")},
    "binding.peer.parent": {"peer": Peer("channel", "P")},
    "binding.peer.wildcard": {"peer": Peer("channel", "*")},
    "binding.guild+roles": {"guild": "G", "roles": ("R",)},
    "binding.guild": {"guild": "G"},
    "binding.team": {"team": "T"},
    "binding.account": {},
    "binding.channel": {"account": "*"},
}

# The agent each tier's binding routes to (the default tier routes to the router's default agent).
TIER_AGENT = {
    "binding.peer": "peer-agent",
    "binding.peer.parent": "parent-agent",
    "binding.peer.wildcard": "wildcard-agent",
    "binding.guild+roles": "roles-agent",
    "binding.guild": "guild-agent",
    "binding.team": "team-agent",
    "binding.account": "account-agent",
    "binding.channel": "channel-agent",
    "default": FALLBACK,
}


def tier_binding(tier: str, agent: str | None = None) -> Binding:
    """A Discord binding in `tier` that matches EVERYTHING."""
    return Binding(agent=agent or TIER_AGENT[tier], channel="discord", **TIER_FIELDS[tier])


def bindings_for(*tiers: str) -> list[Binding]:
    """One binding per tier, in the order given; the default tier needs no binding."""
    return [tier_binding(tier) for tier in tiers if tier != "default"]


def route(bindings: list[Binding], source: RoutingInput) -> tuple[str, str]:
    """(agent, matched_by) for `source` under `bindings`, with FALLBACK as the default agent."""
    found = Router(bindings, default_agent=FALLBACK).resolve(source)
    return found.agent, found.matched_by


def message(channel: str = "discord", **fields: Any) -> RoutingInput:
    return RoutingInput(channel=channel, **fields)


# --- Normalization -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("telegram", "telegram"), (" Telegram ", "telegram"), ("DISCORD", "discord"), ("", ""), (None, "")],
)
def test_channel_is_trimmed_and_lowercased(raw: str | None, expected: str) -> None:
    assert normalize_channel(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("work", "work"),
        (" Work Bot! ", "work-bot"),
        ("WORK", "work"),
        ("a  b!!c", "a-b-c"),
        ("a_b-c", "a_b-c"),
        ("--edge--", "edge"),
        ("!!edge!!", "edge"),
        ("Ünïcode", "n-code"),
        ("x" * 100, "x" * 64),
        ("x" * 63 + "!y", "x" * 63),
        ("", "default"),
        ("   ", "default"),
        ("!!!", "default"),
        (None, "default"),
    ],
)
def test_account_id_normalization(raw: str | None, expected: str) -> None:
    assert normalize_account(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (" 42 ", "42"),
        (-1001234567890, "-1001234567890"),
        (0, "0"),
        ("0123", "0123"),
        ("", None),
        ("  ", None),
        (None, None),
    ],
)
def test_ids_are_trimmed_and_empty_counts_as_missing(raw: str | int | None, expected: str | None) -> None:
    assert normalize_id(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("direct", "direct"), ("dm", "direct"), (" DM ", "direct"), ("group", "group"), ("Channel", "channel")],
)
def test_peer_kinds_accept_dm_as_direct(raw: str, expected: str) -> None:
    assert normalize_peer_kind(raw) == expected
    assert Peer(raw, "1").kind == expected


@pytest.mark.parametrize("kind", ["user", "thread", "", "groups"])
def test_unknown_peer_kind_is_a_value_error(kind: str) -> None:
    with pytest.raises(ValueError):
        normalize_peer_kind(kind)
    with pytest.raises(ValueError):
        Peer(kind, "1")


@pytest.mark.parametrize(
    ("text", "kind", "peer_id"),
    [
        ("group:-100123:topic:5", "group", "-100123:topic:5"),
        ("dm:42", "direct", "42"),
        ("channel:C0ABC", "channel", "C0ABC"),
        ("group:", "group", None),
    ],
)
def test_peer_parse_splits_at_the_first_colon(text: str, kind: str, peer_id: str | None) -> None:
    assert Peer.parse(text) == Peer(kind, peer_id)
    assert (Peer.parse(text).kind, Peer.parse(text).id) == (kind, peer_id)


@pytest.mark.parametrize("text", ["group", "", "robot:1"])
def test_peer_parse_refuses_text_without_a_valid_kind(text: str) -> None:
    with pytest.raises(ValueError):
        Peer.parse(text)


def test_routing_input_normalizes_its_fields() -> None:
    source = RoutingInput(
        channel=" Discord ",
        account=" Work Bot! ",
        guild=" G ",
        team="  ",
        member_roles=(" R ", "", "  "),
        thread="",
    )
    assert (source.channel, source.account, source.guild, source.team) == ("discord", "work-bot", "G", None)
    assert source.member_roles == ("R",)
    assert source.thread is None


def test_routing_input_with_empty_account_uses_the_default_account() -> None:
    assert RoutingInput(channel="telegram", account="").account == "default"


# --- Binding tiers and validation ----------------------------------------------------------------


def test_tiers_are_listed_in_the_documented_order() -> None:
    assert TIERS == TIER_ORDER


@pytest.mark.parametrize("tier", BINDING_TIERS)
def test_binding_belongs_to_the_tier_of_its_most_specific_field(tier: str) -> None:
    # A parent match is decided by the input (its parent_peer), so that binding is an ordinary peer binding.
    expected = "binding.peer" if tier == "binding.peer.parent" else tier
    assert tier_binding(tier).tier == expected


@pytest.mark.parametrize(
    ("fields", "tier"),
    [
        ({"peer": Peer("group", "1"), "guild": "G", "roles": ("R",), "account": "*"}, "binding.peer"),
        ({"peer": Peer("group", "*"), "team": "T"}, "binding.peer.wildcard"),
        ({"guild": "G", "roles": ("R",), "account": "work"}, "binding.guild+roles"),
        ({"guild": "G", "roles": ()}, "binding.guild"),
        ({"team": "T", "account": "*"}, "binding.team"),
        ({"account": "work"}, "binding.account"),
        ({"account": "*"}, "binding.channel"),
    ],
)
def test_more_specific_fields_decide_the_tier(fields: dict[str, Any], tier: str) -> None:
    assert Binding(agent="a", channel="discord", **fields).tier == tier


@pytest.mark.parametrize(
    "fields",
    [
        {"roles": ("R",)},
        {"roles": ("R",), "team": "T"},
        {"guild": "G", "team": "T"},
        {"guild": "G", "team": "T", "roles": ("R",)},
    ],
    ids=["roles-without-guild", "roles-with-team", "guild-with-team", "guild-team-roles"],
)
def test_impossible_field_combinations_are_value_errors(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Binding(agent="a", channel="discord", **fields)


def test_binding_normalizes_channel_and_account() -> None:
    binding = Binding(agent="a", channel=" Slack ", account=" Work Bot! ")
    assert (binding.channel, binding.account) == ("slack", "work-bot")


# --- Each tier on its own ------------------------------------------------------------------------


@pytest.mark.parametrize("tier", TIER_ORDER)
def test_each_tier_routes_on_its_own(tier: str) -> None:
    assert route(bindings_for(tier), EVERYTHING) == (TIER_AGENT[tier], tier)


def test_default_agent_answers_when_nothing_matches() -> None:
    bindings = [Binding(agent="tg", channel="telegram", account="*")]
    assert Router(bindings, default_agent="Main").resolve(message()) == Route(
        agent="main", session_key="agent:main:main", matched_by="default"
    )


# --- Precedence between every pair of tiers ------------------------------------------------------

TIER_PAIRS = list(combinations(TIER_ORDER, 2))


def test_every_pair_of_tiers_is_covered() -> None:
    assert len(TIER_PAIRS) == 36


@pytest.mark.parametrize(("higher", "lower"), TIER_PAIRS, ids=[f"{hi}>{lo}" for hi, lo in TIER_PAIRS])
def test_higher_tier_wins_even_when_written_later(higher: str, lower: str) -> None:
    # The lower tier's binding comes first in the file, so file order cannot explain the win.
    assert route(bindings_for(lower, higher), EVERYTHING) == (TIER_AGENT[higher], higher)


# --- File order within a tier --------------------------------------------------------------------


@pytest.mark.parametrize("tier", BINDING_TIERS)
@pytest.mark.parametrize("file_order", [("first", "second"), ("second", "first")])
def test_first_binding_in_the_file_wins_within_a_tier(tier: str, file_order: tuple[str, str]) -> None:
    bindings = [tier_binding(tier, agent) for agent in file_order]
    assert route(bindings, EVERYTHING) == (file_order[0], tier)


def test_file_order_skips_earlier_bindings_that_do_not_match() -> None:
    bindings = [
        Binding(agent="other-guild", channel="discord", peer=Peer("channel", "X"), guild="H"),
        Binding(agent="this-guild", channel="discord", peer=Peer("channel", "X"), guild="G"),
    ]
    assert route(bindings, EVERYTHING) == ("this-guild", "binding.peer")


# --- Every field a binding sets must match -------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "source"),
    [
        ({"peer": Peer("channel", "X"), "guild": "G"}, message(peer=Peer("channel", "X"), guild="H")),
        ({"peer": Peer("channel", "X"), "guild": "G"}, message(peer=Peer("channel", "X"))),
        ({"peer": Peer("channel", "X"), "team": "T"}, message(peer=Peer("channel", "X"), team="U")),
        ({"peer": Peer("channel", "X"), "account": "work"}, message(peer=Peer("channel", "X"))),
        ({"peer": Peer("channel", "*"), "guild": "G"}, message(peer=Peer("channel", "X"), guild="H")),
        ({"guild": "G", "roles": ("R",)}, message(guild="G", member_roles=("S",))),
        ({"guild": "G", "roles": ("R",)}, message(guild="H", member_roles=("R",))),
        ({"guild": "G", "roles": ("R",), "account": "work"}, message(guild="G", member_roles=("R",))),
        ({"guild": "G"}, message(guild="H")),
        ({"guild": "G"}, message()),
        ({"team": "T"}, message(team="U")),
        ({"team": "T", "account": "work"}, message(team="T")),
        ({}, message(channel="telegram")),
        ({"account": "*"}, message(channel="slack")),
    ],
)
def test_a_binding_does_not_match_when_any_field_it_sets_differs(fields: dict[str, Any], source: RoutingInput) -> None:
    assert route([Binding(agent="bound", channel="discord", **fields)], source) == (FALLBACK, "default")


def test_peer_binding_with_guild_matches_inside_that_guild() -> None:
    binding = Binding(agent="bound", channel="discord", peer=Peer("channel", "X"), guild="G")
    assert route([binding], message(peer=Peer("channel", "X"), guild="G")) == ("bound", "binding.peer")


def test_guild_roles_binding_needs_one_listed_role_and_otherwise_falls_to_the_guild_tier() -> None:
    bindings = [
        Binding(agent="staff", channel="discord", guild="G", roles=("MOD", "ADMIN")),
        Binding(agent="everyone", channel="discord", guild="G"),
    ]
    assert route(bindings, message(guild="G", member_roles=("ADMIN",))) == ("staff", "binding.guild+roles")
    assert route(bindings, message(guild="G", member_roles=("GUEST", "MOD"))) == ("staff", "binding.guild+roles")
    assert route(bindings, message(guild="G", member_roles=("GUEST",))) == ("everyone", "binding.guild")
    assert route(bindings, message(guild="G")) == ("everyone", "binding.guild")


def test_roles_empty_tuple_means_no_roles() -> None:
    binding = Binding(agent="guild", channel="discord", guild="G", roles=())
    assert route([binding], message(guild="G")) == ("guild", "binding.guild")


def test_thread_inherits_the_binding_of_its_parent_channel() -> None:
    binding = Binding(agent="support", channel="discord", peer=Peer("channel", "P"))
    thread = message(peer=Peer("channel", "thread-1"), parent_peer=Peer("channel", "P"), thread="thread-1")
    assert route([binding], thread) == ("support", "binding.peer.parent")


def test_parent_binding_still_needs_its_other_fields_to_match() -> None:
    binding = Binding(agent="support", channel="discord", peer=Peer("channel", "P"), guild="G")
    thread = message(peer=Peer("channel", "thread-1"), parent_peer=Peer("channel", "P"), guild="H")
    assert route([binding], thread) == (FALLBACK, "default")


# --- Guild roles: the binding earliest in the file wins ------------------------------------------

ROLE_BINDINGS = [Binding(agent=f"role-{role}", channel="discord", guild="G", roles=(role,)) for role in "ABCDE"]


@pytest.mark.parametrize("member_roles", [("A", "B", "C", "D", "E"), ("E", "D", "C", "B", "A"), ("C", "E", "A")])
def test_guild_roles_picks_the_binding_earliest_in_the_file(member_roles: tuple[str, ...]) -> None:
    assert route(ROLE_BINDINGS, message(guild="G", member_roles=member_roles)) == ("role-a", "binding.guild+roles")


@pytest.mark.parametrize("member_roles", [("B", "D"), ("D", "B"), ("E", "B", "D")])
def test_guild_roles_ignores_bindings_for_roles_the_member_lacks(member_roles: tuple[str, ...]) -> None:
    assert route(ROLE_BINDINGS, message(guild="G", member_roles=member_roles)) == ("role-b", "binding.guild+roles")


def test_guild_roles_earliest_binding_wins_when_file_order_is_reversed() -> None:
    bindings = list(reversed(ROLE_BINDINGS))
    assert route(bindings, message(guild="G", member_roles=("A", "C", "E"))) == ("role-e", "binding.guild+roles")


def test_guild_roles_binding_listing_several_roles_keeps_its_place_in_the_file() -> None:
    bindings = [
        Binding(agent="late-role-first", channel="discord", guild="G", roles=("Z", "B")),
        Binding(agent="early-role", channel="discord", guild="G", roles=("A",)),
    ]
    assert route(bindings, message(guild="G", member_roles=("A", "B"))) == ("late-role-first", "binding.guild+roles")


# --- Accounts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding_account", "input_account", "expected"),
    [
        (None, "default", ("bound", "binding.account")),
        (None, "", ("bound", "binding.account")),
        (None, "work", (FALLBACK, "default")),
        ("", "default", ("bound", "binding.account")),
        ("default", "default", ("bound", "binding.account")),
        ("work", "work", ("bound", "binding.account")),
        ("work", "WORK", ("bound", "binding.account")),
        ("work", "default", (FALLBACK, "default")),
        ("work", "other", (FALLBACK, "default")),
        (" Work Bot! ", "work-bot", ("bound", "binding.account")),
        (" Work Bot! ", "WORK BOT", ("bound", "binding.account")),
        ("*", "default", ("bound", "binding.channel")),
        ("*", "work", ("bound", "binding.channel")),
        ("*", " Any Thing ", ("bound", "binding.channel")),
    ],
)
def test_account_rules(binding_account: str | None, input_account: str, expected: tuple[str, str]) -> None:
    binding = Binding(agent="bound", channel="telegram", account=binding_account)
    assert route([binding], message(channel="telegram", account=input_account)) == expected


@pytest.mark.parametrize(
    ("binding_account", "input_account", "expected"),
    [
        (None, "default", ("bound", "binding.peer")),
        (None, "work", (FALLBACK, "default")),
        ("work", "Work", ("bound", "binding.peer")),
        ("*", "work", ("bound", "binding.peer")),
    ],
)
def test_account_rules_apply_to_peer_bindings_too(
    binding_account: str | None, input_account: str, expected: tuple[str, str]
) -> None:
    binding = Binding(agent="bound", channel="telegram", account=binding_account, peer=Peer("direct", "42"))
    source = message(channel="telegram", account=input_account, peer=Peer("direct", "42"))
    assert route([binding], source) == expected


def test_named_account_binding_beats_channel_wide_binding_written_first() -> None:
    bindings = [
        Binding(agent="any-account", channel="telegram", account="*"),
        Binding(agent="work-only", channel="telegram", account="work"),
    ]
    assert route(bindings, message(channel="telegram", account="work")) == ("work-only", "binding.account")
    assert route(bindings, message(channel="telegram", account="home")) == ("any-account", "binding.channel")


# --- Peer kinds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding_kind", "input_kind", "matches"),
    [
        ("group", "group", True),
        ("group", "channel", True),
        ("channel", "group", True),
        ("channel", "channel", True),
        ("direct", "direct", True),
        ("dm", "direct", True),
        ("direct", "group", False),
        ("direct", "channel", False),
        ("group", "direct", False),
        ("channel", "direct", False),
    ],
)
@pytest.mark.parametrize("peer_id", ["42", "*"], ids=["exact", "wildcard"])
def test_group_and_channel_kinds_match_each_other_never_direct(
    binding_kind: str, input_kind: str, matches: bool, peer_id: str
) -> None:
    binding = Binding(agent="bound", channel="telegram", peer=Peer(binding_kind, peer_id))
    tier = "binding.peer" if peer_id == "42" else "binding.peer.wildcard"
    expected = ("bound", tier) if matches else (FALLBACK, "default")
    assert route([binding], message(channel="telegram", peer=Peer(input_kind, "42"))) == expected


@pytest.mark.parametrize(("binding_kind", "matches"), [("group", True), ("channel", True), ("direct", False)])
def test_parent_peer_follows_the_same_kind_rules(binding_kind: str, matches: bool) -> None:
    binding = Binding(agent="bound", channel="telegram", peer=Peer(binding_kind, "-100123"))
    source = message(channel="telegram", peer=Peer("group", "-100123:topic:5"), parent_peer=Peer("channel", "-100123"))
    expected = ("bound", "binding.peer.parent") if matches else (FALLBACK, "default")
    assert route([binding], source) == expected


# --- Case-insensitive ids ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "source", "matched_by"),
    [
        ({"peer": Peer("channel", "C0ABCDEF")}, message("slack", peer=Peer("channel", "c0abcdef")), "binding.peer"),
        ({"peer": Peer("channel", "c0abcdef")}, message("slack", peer=Peer("channel", "C0ABCDEF")), "binding.peer"),
        (
            {"peer": Peer("channel", "C0PARENT")},
            message("slack", peer=Peer("channel", "C0X"), parent_peer=Peer("channel", "c0parent")),
            "binding.peer.parent",
        ),
        ({"team": "T0123ABCD"}, message("slack", team="t0123abcd"), "binding.team"),
        ({"team": "t0123abcd"}, message("slack", team="T0123ABCD"), "binding.team"),
        ({"guild": "GuildX"}, message("slack", guild="GUILDX"), "binding.guild"),
        (
            {"guild": "G", "roles": ("ROLE",)},
            message("slack", guild="g", member_roles=("Role",)),
            "binding.guild+roles",
        ),
        (
            {"account": "*", "peer": Peer("direct", "U0ABC")},
            message(" SLACK ", peer=Peer("dm", "u0abc")),
            "binding.peer",
        ),
    ],
)
def test_ids_match_case_insensitively(fields: dict[str, Any], source: RoutingInput, matched_by: str) -> None:
    binding = Binding(agent="Support", channel="Slack", **fields)
    assert route([binding], source) == ("support", matched_by)


# --- Missing peer ids ----------------------------------------------------------------------------


@pytest.mark.parametrize("empty_id", ["", "   ", None])
def test_a_peer_without_an_id_keeps_its_kind_so_only_a_kind_wildcard_matches_it(empty_id: str | None) -> None:
    exact = Binding(agent="exact", channel="telegram", peer=Peer("group", "-100"))
    other_kind = Binding(agent="dms", channel="telegram", peer=Peer("direct", "*"))
    wildcard = Binding(agent="groups", channel="telegram", peer=Peer("group", "*"))
    account = Binding(agent="account", channel="telegram")
    source = message(channel="telegram", peer=Peer("group", empty_id), parent_peer=Peer("group", empty_id))
    assert route([exact, other_kind, wildcard, account], source) == ("groups", "binding.peer.wildcard")
    assert route([exact, other_kind, account], source) == ("account", "binding.account")  # no exact id can match
    dm = message(channel="telegram", peer=Peer("direct", empty_id))
    assert route([wildcard, other_kind, account], dm) == ("dms", "binding.peer.wildcard")  # as OpenClaw resolves it


def test_binding_peer_needs_an_id() -> None:
    with pytest.raises(ValueError):
        Binding(agent="a", channel="telegram", peer=Peer("group", ""))


# --- Scale ---------------------------------------------------------------------------------------


def test_ten_thousand_bindings_still_resolve_correctly() -> None:
    bindings = [Binding(agent=f"agent-{n}", channel="telegram", peer=Peer("group", f"-100{n}")) for n in range(10_000)]
    bindings.append(Binding(agent="shadowed", channel="telegram", peer=Peer("group", "-1005000")))
    bindings.append(Binding(agent="catch-all", channel="telegram", account="*"))
    router = Router(bindings, default_agent=FALLBACK)
    assert len(bindings) == 10_002

    def resolve(peer_id: str, kind: str = "group") -> tuple[str, str]:
        found = router.resolve(message(channel="telegram", peer=Peer(kind, peer_id)))
        return found.agent, found.matched_by

    assert resolve("-1000") == ("agent-0", "binding.peer")
    assert resolve("-1005000") == ("agent-5000", "binding.peer")
    assert resolve("-1009999") == ("agent-9999", "binding.peer")
    assert resolve("-10010000") == ("catch-all", "binding.channel")
    assert resolve("-1001", kind="direct") == ("catch-all", "binding.channel")
    assert router.resolve(message(channel="discord")).matched_by == "default"


def test_binding_ids_are_trimmed_and_empty_ones_count_as_missing() -> None:
    assert Binding(agent="a", channel="discord", guild="").tier == "binding.account"
    router = Router([Binding(agent="a", channel="discord", guild=" G ", roles=(" R ", ""))], default_agent="main")
    route = router.resolve(RoutingInput("discord", guild="g", member_roles=("r",)))
    assert (route.agent, route.matched_by) == ("a", "binding.guild+roles")


@pytest.mark.parametrize("agent", ["../x", "a/b", "", "-lead", "a" * 65, "a:b"])
def test_agent_ids_that_could_escape_a_key_or_path_are_refused(agent: str) -> None:
    with pytest.raises(ValueError, match="not a valid id"):
        Binding(agent=agent, channel="telegram")
    with pytest.raises(ValueError, match="not a valid id"):
        Router(default_agent=agent)
