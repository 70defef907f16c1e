"""Session keys: main sessions, DM scopes, groups, threads, identity links and odd ids, via function and Router."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from routing import Binding, DmScope, Peer, Route, Router, RoutingInput, session_key

# Identity links as Router takes them (canonical name -> members) and as session_key takes them (member -> name).
LINKS = {"alice": ["telegram:111", "discord:222"]}
FLAT_LINKS = {"telegram:111": "alice", "discord:222": "alice"}

KeyBuilder = Callable[..., str]


def via_function(
    source: RoutingInput, dm_scope: DmScope = "per-channel-peer", *, agent: str = "main", linked: bool = False
) -> str:
    """The key from routing.session_key, called directly."""
    return session_key(agent, source, dm_scope, FLAT_LINKS if linked else None)


def via_router(
    source: RoutingInput, dm_scope: DmScope = "per-channel-peer", *, agent: str = "main", linked: bool = False
) -> str:
    """The key from Router.resolve, with no bindings so the default agent answers."""
    router = Router(default_agent=agent, dm_scope=dm_scope, identity_links=LINKS if linked else None)
    return router.resolve(source).session_key


both_ways = pytest.mark.parametrize("build_key", [via_function, via_router], ids=["session_key", "router"])


def dm(peer_id: str | int | None, channel: str = "telegram", **fields: Any) -> RoutingInput:
    return RoutingInput(channel=channel, peer=Peer("direct", peer_id), **fields)


def room(kind: str, peer_id: str | int | None, channel: str = "telegram", **fields: Any) -> RoutingInput:
    return RoutingInput(channel=channel, peer=Peer(kind, peer_id), **fields)


ALL_SCOPES: list[DmScope] = ["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]
LINKING_SCOPES: list[DmScope] = ["per-peer", "per-channel-peer", "per-account-channel-peer"]


# --- Main session --------------------------------------------------------------------------------


@both_ways
@pytest.mark.parametrize("dm_scope", ALL_SCOPES)
def test_input_without_peer_uses_the_main_session(build_key: KeyBuilder, dm_scope: DmScope) -> None:
    source = RoutingInput(channel="discord", account="work", guild="G", team="T")
    assert build_key(source, dm_scope, agent="helper") == "agent:helper:main"


# --- Direct messages by dm_scope -----------------------------------------------------------------


@both_ways
@pytest.mark.parametrize(
    ("dm_scope", "expected"),
    [
        ("main", "agent:main:main"),
        ("per-peer", "agent:main:direct:42"),
        ("per-channel-peer", "agent:main:telegram:direct:42"),
        ("per-account-channel-peer", "agent:main:telegram:work:direct:42"),
    ],
)
def test_direct_message_key_follows_dm_scope(build_key: KeyBuilder, dm_scope: DmScope, expected: str) -> None:
    assert build_key(dm("42", account="work"), dm_scope) == expected


def test_dm_scope_defaults_to_per_channel_peer() -> None:
    source = dm("42", account="work")
    assert session_key("main", source) == "agent:main:telegram:direct:42"
    assert Router().resolve(source).session_key == "agent:main:telegram:direct:42"


@both_ways
def test_per_account_key_uses_the_normalized_account(build_key: KeyBuilder) -> None:
    source = dm("42", channel=" Telegram ", account=" Work Bot! ")
    assert build_key(source, "per-account-channel-peer") == "agent:main:telegram:work-bot:direct:42"
    assert build_key(dm("42"), "per-account-channel-peer") == "agent:main:telegram:default:direct:42"


# --- Groups and channels -------------------------------------------------------------------------


@both_ways
@pytest.mark.parametrize("dm_scope", ALL_SCOPES)
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (room("group", "-100123"), "agent:main:telegram:group:-100123"),
        (room("channel", "C0ABC", channel="slack", account="work"), "agent:main:slack:channel:c0abc"),
        (room("channel", "555", channel="discord", guild="G"), "agent:main:discord:channel:555"),
    ],
    ids=["telegram-group", "slack-channel", "discord-channel"],
)
def test_group_and_channel_keys_ignore_dm_scope(
    build_key: KeyBuilder, dm_scope: DmScope, source: RoutingInput, expected: str
) -> None:
    assert build_key(source, dm_scope) == expected


# --- Threads -------------------------------------------------------------------------------------


@both_ways
@pytest.mark.parametrize(
    ("source", "dm_scope", "expected"),
    [
        (
            room("channel", "555", channel="discord", thread="999"),
            "per-channel-peer",
            "agent:main:discord:channel:555:thread:999",
        ),
        (
            room("channel", "C0ABC", channel="slack", thread="1700000000.1234"),
            "per-peer",
            "agent:main:slack:channel:c0abc:thread:1700000000.1234",
        ),
        (dm("42", thread="T9"), "per-channel-peer", "agent:main:telegram:direct:42:thread:t9"),
        (dm("42", thread="T9"), "per-peer", "agent:main:direct:42:thread:t9"),
        (dm("42", thread=" "), "per-channel-peer", "agent:main:telegram:direct:42"),
    ],
    ids=["discord-thread", "slack-thread", "dm-thread", "dm-thread-per-peer", "blank-thread"],
)
def test_thread_appends_its_id(build_key: KeyBuilder, source: RoutingInput, dm_scope: DmScope, expected: str) -> None:
    assert build_key(source, dm_scope) == expected


# --- Identity links ------------------------------------------------------------------------------


@both_ways
@pytest.mark.parametrize(
    ("dm_scope", "source", "expected"),
    [
        ("per-peer", dm("111"), "agent:main:direct:alice"),
        ("per-peer", dm("222", channel="discord"), "agent:main:direct:alice"),
        ("per-channel-peer", dm("111"), "agent:main:telegram:direct:alice"),
        ("per-channel-peer", dm("222", channel="discord"), "agent:main:discord:direct:alice"),
        ("per-account-channel-peer", dm("111", account="work"), "agent:main:telegram:work:direct:alice"),
        ("per-account-channel-peer", dm("222", channel="discord"), "agent:main:discord:default:direct:alice"),
    ],
)
def test_identity_links_replace_a_linked_dm_peer(
    build_key: KeyBuilder, dm_scope: DmScope, source: RoutingInput, expected: str
) -> None:
    assert build_key(source, dm_scope, linked=True) == expected


@both_ways
def test_identity_links_share_one_session_across_channels_under_per_peer(build_key: KeyBuilder) -> None:
    telegram = build_key(dm("111"), "per-peer", linked=True)
    discord = build_key(dm("222", channel="discord"), "per-peer", linked=True)
    assert telegram == discord == "agent:main:direct:alice"


@both_ways
@pytest.mark.parametrize(
    ("dm_scope", "source", "expected"),
    [
        ("main", dm("111"), "agent:main:main"),
        ("per-channel-peer", room("group", "111"), "agent:main:telegram:group:111"),
        ("per-peer", room("channel", "222", channel="discord"), "agent:main:discord:channel:222"),
        ("per-channel-peer", dm("222"), "agent:main:telegram:direct:222"),
        ("per-channel-peer", dm("111", channel="discord"), "agent:main:discord:direct:111"),
        ("per-peer", dm("333"), "agent:main:direct:333"),
    ],
    ids=["dm-scope-main", "group", "channel", "id-linked-on-other-channel", "other-id-on-linked-channel", "unlinked"],
)
def test_identity_links_leave_other_keys_alone(
    build_key: KeyBuilder, dm_scope: DmScope, source: RoutingInput, expected: str
) -> None:
    assert build_key(source, dm_scope, linked=True) == expected


def test_router_identity_links_are_case_and_space_insensitive() -> None:
    router = Router(dm_scope="per-peer", identity_links={"Alice": [" Telegram:111 ", "SLACK:U0ALICE"]})
    assert router.resolve(dm("111")).session_key == "agent:main:direct:alice"
    assert router.resolve(dm("u0alice", channel="Slack")).session_key == "agent:main:direct:alice"
    assert router.resolve(dm("U0ALICE", channel="slack")).session_key == "agent:main:direct:alice"


# --- Missing ids ---------------------------------------------------------------------------------


@both_ways
@pytest.mark.parametrize(
    ("source", "dm_scope", "expected"),
    [
        (room("group", ""), "per-channel-peer", "agent:main:telegram:group:unknown"),
        (room("channel", "  ", channel="discord"), "per-channel-peer", "agent:main:discord:channel:unknown"),
        (room("group", None), "per-channel-peer", "agent:main:telegram:group:unknown"),
        (dm(""), "per-peer", "agent:main:direct:unknown"),
        (dm(""), "per-channel-peer", "agent:main:telegram:direct:unknown"),
        (dm(None), "per-account-channel-peer", "agent:main:telegram:default:direct:unknown"),
        (room("group", "-100123", channel=" "), "per-channel-peer", "agent:main:unknown:group:-100123"),
        (dm("42", channel=""), "per-channel-peer", "agent:main:unknown:direct:42"),
    ],
)
def test_missing_ids_become_unknown(
    build_key: KeyBuilder, source: RoutingInput, dm_scope: DmScope, expected: str
) -> None:
    assert build_key(source, dm_scope) == expected


# --- Telegram forum topics and big ids -----------------------------------------------------------


def test_forum_topic_routed_by_its_group_binding_keeps_the_topic_in_the_key() -> None:
    router = Router([Binding(agent="ops", channel="telegram", peer=Peer("group", "-100123"))])
    topic = RoutingInput(
        channel="telegram", peer=Peer.parse("group:-100123:topic:7"), parent_peer=Peer.parse("group:-100123")
    )
    assert router.resolve(topic) == Route(
        agent="ops", session_key="agent:ops:telegram:group:-100123:topic:7", matched_by="binding.peer.parent"
    )


def test_forum_topic_key_from_the_function() -> None:
    topic = RoutingInput(channel="telegram", peer=Peer.parse("group:-100123:topic:7"))
    assert session_key("ops", topic) == "agent:ops:telegram:group:-100123:topic:7"


def test_group_itself_still_matches_its_binding_directly() -> None:
    router = Router([Binding(agent="ops", channel="telegram", peer=Peer("group", "-100123"))])
    assert router.resolve(room("group", "-100123")) == Route(
        agent="ops", session_key="agent:ops:telegram:group:-100123", matched_by="binding.peer"
    )


@pytest.mark.parametrize(
    "peer_id", [-1001234567890, "-1001234567890", " -1001234567890 "], ids=["int", "str", "padded"]
)
def test_big_negative_ids_survive_exactly(peer_id: str | int) -> None:
    router = Router([Binding(agent="ops", channel="telegram", peer=Peer("group", -1001234567890))])
    source = room("group", peer_id)
    expected = "agent:ops:telegram:group:-1001234567890"
    assert session_key("ops", source) == expected
    assert router.resolve(source) == Route(agent="ops", session_key=expected, matched_by="binding.peer")


@both_ways
def test_big_negative_dm_id_survives_exactly(build_key: KeyBuilder) -> None:
    assert build_key(dm(-1001234567890), "per-peer") == "agent:main:direct:-1001234567890"


# --- Lowercase -----------------------------------------------------------------------------------


def test_keys_are_lowercase_from_the_function() -> None:
    source = RoutingInput(channel="Slack", account="Work", peer=Peer("DM", "U0ABC"), thread="TS1")
    assert (
        session_key("Helper", source, "per-account-channel-peer") == "agent:helper:slack:work:direct:u0abc:thread:ts1"
    )
    assert session_key("Helper", RoutingInput(channel="Slack")) == "agent:helper:main"


def test_keys_and_agents_are_lowercase_from_the_router() -> None:
    router = Router([Binding(agent="Support", channel="slack", team="T0ABC")], default_agent="Main")
    bound = RoutingInput(channel="Slack", team="T0ABC", peer=Peer("channel", "C0XYZ"), thread="TS1")
    unbound = RoutingInput(channel="Slack", peer=Peer("direct", "U0ABC"))
    assert router.resolve(bound) == Route(
        agent="support", session_key="agent:support:slack:channel:c0xyz:thread:ts1", matched_by="binding.team"
    )
    assert router.resolve(unbound) == Route(
        agent="main", session_key="agent:main:slack:direct:u0abc", matched_by="default"
    )
