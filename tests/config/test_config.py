"""bindings.yaml: sections, ids kept as written, ${VAR} substitution, and errors that name file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.config.errors import ConfigError
from bot.config.loading import load_config, parse_config
from bot.config.settings import Config
from routing import Peer, RoutingInput


def parse(text: str, **environ: str) -> Config:
    return parse_config(textwrap.dedent(text), "bindings.yaml", environ)


def errors(text: str, **environ: str) -> list[str]:
    """Every error the text produces, rendered as the CLI prints them."""
    with pytest.raises(ConfigError) as caught:
        parse(text, **environ)
    return str(caught.value).splitlines()


# --- sections and defaults ------------------------------------------------------------------------


def test_an_empty_file_is_one_implicit_main_agent() -> None:
    config = parse("")
    assert [agent.id for agent in config.agents] == ["main"]
    assert config.default_agent == "main"
    assert config.session.dm_scope == "per-channel-peer"
    assert config.bindings == []


def test_sections_left_empty_read_as_absent() -> None:
    config = parse(
        """
        agents:
        bindings:
          # every binding commented out
        owners:
        """
    )
    assert [agent.id for agent in config.agents] == ["main"]
    assert config.bindings == []
    assert config.owners == []


def test_the_example_bindings_file_is_valid() -> None:
    config = load_config(Path(__file__).parent.parent.parent / "bindings.example.yaml", environ={})
    assert config.default_agent == "main"
    assert {agent.id for agent in config.agents} >= {"main"}
    assert config.bindings, "the example shows bindings"
    assert config.owners == [], "no placeholder owner: /whoami and `bot owners add` make the first one"


def test_agent_ids_are_lowercased_and_the_default_is_marked_or_first() -> None:
    config = parse(
        """
        agents:
          - id: Support
          - id: OPS
            default: yes
        bindings:
          - agent: SUPPORT
            match: {channel: Telegram}
        """
    )
    assert [agent.id for agent in config.agents] == ["support", "ops"]
    assert config.default_agent == "ops"
    assert config.bindings[0].agent == "support"
    assert config.bindings[0].match.channel == "telegram"
    assert parse("agents: [{id: a}, {id: b}]").default_agent == "a"


def test_agents_inherit_model_and_workspace_from_defaults(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(
        textwrap.dedent(
            """
            defaults: {model: openrouter/anthropic/claude-sonnet-4, workspace_root: spaces}
            agents:
              - id: main
              - id: ops
                model: openai/gpt-4.1
                workspace: /srv/ops
            """
        )
    )
    config = load_config(path)
    assert config.model_for("main") == "openrouter/anthropic/claude-sonnet-4"
    assert config.model_for("ops") == "openai/gpt-4.1"
    assert config.workspace("main") == tmp_path / "spaces" / "main"
    assert config.workspace("ops") == Path("/srv/ops")


def test_owners_are_channel_and_user_id() -> None:
    config = parse("owners: [Telegram:123, 'discord: 0456']")
    assert config.owners == ["telegram:123", "discord:0456"]


# --- ids stay text, exactly as written ---------------------------------------------------------------


def test_ids_keep_the_text_as_written() -> None:
    config = parse(
        """
        bindings:
          - agent: main
            match: {channel: telegram, peer: {kind: group, id: -1001234567890}}
          - agent: main
            match: {channel: discord, guild: 0123, roles: [1e3, 0x1F]}
          - agent: main
            match: {channel: slack, team: T0123ABCD, account: 007}
        owners: [telegram:0042]
        """
    )
    first, second, third = (binding.match for binding in config.bindings)
    assert first.peer is not None and first.peer.id == "-1001234567890"
    assert second.guild == "0123"
    assert second.roles == ["1e3", "0x1F"]
    assert third.team == "T0123ABCD"
    assert third.account == "007"
    assert config.owners == ["telegram:0042"]


def test_yaml_words_and_numbers_are_typed_by_the_schema_not_by_yaml() -> None:
    config = parse(
        """
        agents:
          - id: no        # YAML 1.1 reads this as false
            default: on
        """
    )
    assert config.agents[0].id == "no"
    assert config.agents[0].default is True


@pytest.mark.parametrize(
    ("written", "seconds"), [("90", 90.0), ("0.5", 0.5), ("0", 0.0), ("2m", 120.0), ("1h30m", 5400.0)]
)
def test_a_duration_is_a_number_of_seconds_or_an_interval(written: str, seconds: float) -> None:
    assert parse(f"lanes: {{stop_grace: {written}}}\ncron: {{catch_up: {written}}}\n").lanes.stop_grace == seconds


@pytest.mark.parametrize(
    ("written", "why"),
    [("-1", "must not be negative"), ("nan", "must be a duration"), ("inf", "must be a duration"),
     ("soon", "is not an interval")],
)  # fmt: skip
def test_what_is_not_a_duration_is_refused_naming_its_line_and_key(written: str, why: str) -> None:
    with pytest.raises(ConfigError, match=f"bindings.yaml:2: lanes.stop_grace: .*{why}"):
        parse(f"lanes:\n  stop_grace: {written}\n")


def test_integer_ids_given_from_python_become_strings() -> None:
    config = Config.model_validate(
        {
            "bindings": [
                {"agent": "main", "match": {"channel": "telegram", "peer": {"kind": "dm", "id": -1001234567890}}}
            ]
        }
    )
    peer = config.bindings[0].match.peer
    assert peer is not None and (peer.kind, peer.id) == ("direct", "-1001234567890")


def test_a_routing_binding_is_built_from_each_config_binding() -> None:
    config = parse(
        """
        agents: [{id: main}, {id: ops}]
        bindings:
          - agent: ops
            match: {channel: telegram, peer: {kind: group, id: -1001234567890}}
        """
    )
    route = config.router().resolve(RoutingInput("telegram", peer=Peer("group", "-1001234567890")))
    assert (route.agent, route.session_key, route.matched_by) == (
        "ops",
        "agent:ops:telegram:group:-1001234567890",
        "binding.peer",
    )


# --- ${VAR} substitution --------------------------------------------------------------------------------


def test_env_references_are_replaced_in_values() -> None:
    config = parse(
        """
        defaults: {model: "${PROVIDER}/${MODEL:-gpt-4.1}"}
        owners: ["telegram:${OWNER_ID}"]
        """,
        PROVIDER="openrouter",
        OWNER_ID="-100777",
    )
    assert config.defaults.model == "openrouter/gpt-4.1"
    assert config.owners == ["telegram:-100777"]


def test_an_empty_variable_takes_the_default() -> None:
    assert parse("defaults: {model: '${M:-fallback/x}'}", M="").defaults.model == "fallback/x"


def test_env_references_in_comments_and_keys_are_left_alone() -> None:
    config = parse(
        """
        # set ${UNSET_IN_COMMENT} before running
        providers:
          local: {kind: openai, base_url: "http://127.0.0.1:1", headers: {"${NOT_A_KEY}": v}}
        """
    )
    assert config.providers is not None and config.providers["local"].headers == {"${NOT_A_KEY}": "v"}


def test_a_value_cannot_inject_yaml() -> None:
    config = parse("defaults: {workspace_root: '${M}'}", M="x\nagents: [{id: evil}]")
    assert config.defaults.workspace_root == "x\nagents: [{id: evil}]"
    assert [agent.id for agent in config.agents] == ["main"]


def test_a_doubled_dollar_is_a_literal_reference() -> None:
    assert parse("defaults: {workspace_root: 'a$${B}c'}").defaults.workspace_root == "a${B}c"


def test_an_unset_variable_is_an_error_naming_it_and_its_line() -> None:
    assert errors(
        """
        defaults:
          model: ${SWITCHBOARD_TEST_UNSET}
        """
    ) == [
        "bindings.yaml:3: defaults.model: environment variable ${SWITCHBOARD_TEST_UNSET} is not set "
        "(give it a value, or a default: ${SWITCHBOARD_TEST_UNSET:-value})"
    ]


def test_env_values_never_appear_in_errors() -> None:
    lines = errors("agents: [{id: '${SECRET}'}]", SECRET="sk-live-abcdef/not-an-id")
    assert len(lines) == 1
    assert lines[0].startswith("bindings.yaml:1: agents[0].id: not a valid id")
    assert "sk-live" not in lines[0]


# --- errors name file, line and key path ---------------------------------------------------------------


def test_a_wrong_peer_kind_names_line_and_path() -> None:
    assert errors(
        """
        agents: [{id: main}]
        bindings:
          - agent: main
            match: {channel: telegram}
          - agent: main
            match: {channel: telegram}
          - agent: main
            match:
              channel: telegram
              peer:
                kind: person
                id: 5
        """
    ) == ["bindings.yaml:12: bindings[2].match.peer.kind: must be one of direct, group, channel"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "agents:\n  - id: main\n    defualt: true\n",
            "bindings.yaml:3: agents[0].defualt: unknown key; did you mean 'default'?",
            id="unknown key with suggestion",
        ),
        pytest.param(
            "bindngs: []\n",
            "bindings.yaml:1: bindngs: unknown key; did you mean 'bindings'?",
            id="unknown top-level section",
        ),
        pytest.param(
            "session:\n  zzz: 1\n",
            "bindings.yaml:2: session.zzz: unknown key; valid keys are dm_scope, identity_links, queue",
            id="unknown key without a close match",
        ),
        pytest.param(
            "agents:\n  - id: a\n  - id: b\n  - id: A\n",
            "bindings.yaml:4: agents[2].id: duplicate agent id 'a' (also agents[0])",
            id="duplicate agent id after lowercasing",
        ),
        pytest.param(
            "agents:\n  - {id: a, default: true}\n  - {id: b, default: true}\n",
            "bindings.yaml:3: agents[1].default: only one agent may be the default (agents[0] is)",
            id="two defaults",
        ),
        pytest.param(
            "agents: [{id: main}, {id: ops}]\nbindings:\n  - agent: opz\n    match: {channel: slack}\n",
            "bindings.yaml:3: bindings[0].agent: no agent 'opz'; did you mean 'ops'?",
            id="binding names a missing agent",
        ),
        pytest.param(
            "bindings:\n  - agent: ops\n    match: {channel: slack}\n",
            "bindings.yaml:2: bindings[0].agent: no agent 'ops'; agents are main",
            id="binding names an agent while only the implicit main exists",
        ),
        pytest.param(
            "agents:\n  - id: ../etc\n",
            "bindings.yaml:2: agents[0].id: not a valid id: use letters, digits, '_' and '-', "
            "start with a letter or digit, at most 64 characters",
            id="agent id that could escape a path",
        ),
        pytest.param(
            "agents:\n  - id: " + "a" * 65 + "\n",
            "bindings.yaml:2: agents[0].id: not a valid id: use letters, digits, '_' and '-', "
            "start with a letter or digit, at most 64 characters",
            id="agent id too long",
        ),
        pytest.param(
            "bindings:\n  - agent: main\n    match:\n      channel: discord\n      roles: [1]\n",
            "bindings.yaml:3: bindings[0].match: roles needs guild: member roles only exist inside a Discord guild",
            id="roles without guild",
        ),
        pytest.param(
            "bindings:\n  - agent: main\n    match: {channel: x, guild: 1, team: 2}\n",
            "bindings.yaml:3: bindings[0].match: guild and team cannot both be set: no message has both "
            "(guild is Discord, team is Slack)",
            id="guild with team",
        ),
        pytest.param(
            "bindings:\n  - agent: main\n    match:\n      channel: x\n      peer: {kind: group, id: ''}\n",
            "bindings.yaml:5: bindings[0].match.peer.id: must not be empty",
            id="empty peer id",
        ),
        pytest.param(
            "bindings:\n  - agent: main\n",
            "bindings.yaml:2: bindings[0].match: required key is missing",
            id="missing match",
        ),
        pytest.param(
            "bindings:\n  - agent: main\n    match: {channel: 'tele gram'}\n",
            "bindings.yaml:3: bindings[0].match.channel: must be a channel name such as telegram, discord or slack",
            id="bad channel name",
        ),
        pytest.param(
            "session:\n  dm_scope: everyone\n",
            "bindings.yaml:2: session.dm_scope: must be one of main, per-peer, per-channel-peer, "
            "per-account-channel-peer",
            id="unknown dm_scope",
        ),
        pytest.param(
            "agents:\n  - id: a\n    default: maybe\n",
            "bindings.yaml:3: agents[0].default: must be true or false",
            id="not a boolean",
        ),
        pytest.param(
            "agents: {id: main}\n",
            "bindings.yaml:1: agents: must be a list",
            id="mapping where a list belongs",
        ),
        pytest.param(
            "owners:\n  - telegram\n",
            "bindings.yaml:2: owners[0]: must be <channel>:<user id>, e.g. telegram:123456789",
            id="owner without channel",
        ),
        pytest.param(
            "session:\n  identity_links:\n    alice: [telegram:1]\n    bob: [discord:2, Telegram:1]\n",
            "bindings.yaml:4: session.identity_links.bob[1]: telegram:1 is already linked to 'alice'",
            id="one account linked to two people",
        ),
        pytest.param(
            "session:\n  identity_links:\n    al/ice: [telegram:1]\n",
            "bindings.yaml:3: session.identity_links.al/ice: not a valid id: use letters, digits, '_' and '-', "
            "start with a letter or digit, at most 64 characters",
            id="identity link name that could escape a key",
        ),
        pytest.param(
            "agents: []\nagents: []\n",
            "bindings.yaml:2: agents: duplicate key 'agents' (first set on line 1)",
            id="duplicate key",
        ),
        pytest.param(
            "providers:\n  g: {kind: gemini, base_url: 'https://x'}\n",
            "bindings.yaml:2: providers.g.kind: unknown provider kind 'gemini' (known: anthropic, openai)",
            id="a provider kind no plugin provides",
        ),
        pytest.param(
            "- just\n- a list\n",
            "bindings.yaml:1: the config must be a mapping of sections (agents, bindings, ...)",
            id="not a mapping",
        ),
    ],
)
def test_each_config_error_names_its_line_and_key(text: str, expected: str) -> None:
    assert errors(text) == [expected]


def test_a_yaml_syntax_error_names_its_line() -> None:
    lines = errors("agents:\n  - id: main\nbindings: [\n")
    assert len(lines) == 1
    assert lines[0].startswith("bindings.yaml:4:1: invalid YAML: ")  # line and column


def test_every_error_is_reported_at_once_in_file_order() -> None:
    lines = errors(
        """
        agents:
          - id: main
          - id: main
        bindings:
          - agent: main
            match: {channel: telegram, peer: {kind: dms, id: 1}}
          - agent: main
            match: {channel: slack, pear: {}}
        session: {dm_scope: nope}
        """
    )
    assert [line.split(": ")[0] for line in lines] == [
        "bindings.yaml:4",
        "bindings.yaml:7",
        "bindings.yaml:9",
        "bindings.yaml:10",
    ]


def test_yaml_anchors_and_merge_keys_work() -> None:
    config = parse(
        """
        agents: [{id: main}, {id: ops}]
        bindings:
          - agent: ops
            match: &ops_chat {channel: telegram, peer: {kind: group, id: -100}}
          - agent: ops
            match:
              <<: *ops_chat
              account: "*"
        """
    )
    assert config.bindings[1].match.channel == "telegram"
    assert config.bindings[1].match.account == "*"


def test_an_alias_bomb_is_refused() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    lines = errors("providers:\n" + "\n".join("  " + level for level in levels) + "\n")
    assert len(lines) == 1
    assert lines[0].endswith(": document too large (too many nodes or aliases)")


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "nope.yaml")
    assert str(caught.value) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_a_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_bytes(b"agents: [{id: caf\xe9}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: not UTF-8 text")


def test_a_secret_written_into_the_file_is_a_warning_not_an_error() -> None:
    config = parse(
        """
        providers:
          openrouter: {kind: openai, base_url: "https://example.invalid/v1", api_key: sk-literal-123}
          other: {kind: openai, base_url: "https://example.invalid/v1", api_keys: ["${K1}", sk-two]}
        channels:
          slack:
            accounts:
              main: {bot_token: "${SLACK_BOT_TOKEN}", app_token: xapp-literal}
        """,
        K1="k1",
        SLACK_BOT_TOKEN="xoxb-from-env",
    )
    assert [warning.render("bindings.yaml") for warning in config.warnings] == [
        "bindings.yaml:3: providers.openrouter.api_key: a secret written into the file; use ${VAR} instead",
        "bindings.yaml:4: providers.other.api_keys[1]: a secret written into the file; use ${VAR} instead",
        "bindings.yaml:8: channels.slack.accounts.main.app_token: a secret written into the file; use ${VAR} instead",
    ]


def test_a_channel_credential_whose_variable_is_unset_skips_the_account_instead_of_failing() -> None:
    config = parse("channels:\n  telegram:\n    accounts:\n      main: {token: '${SWITCHBOARD_NO_SUCH_TOKEN}'}\n")
    assert config.unset_credentials("telegram", "main") == ["SWITCHBOARD_NO_SUCH_TOKEN"]
    assert config.unset_credentials("telegram", "other") == []


def test_a_binding_that_can_never_match_its_channels_accounts_is_a_warning() -> None:
    config = parse(
        """
        channels:
          telegram:
            accounts:
              main: {token: "${TOKEN}"}
        bindings:
          - agent: main
            match: {channel: telegram, peer: {kind: group, id: -100}}
          - agent: main
            match: {channel: telegram, account: main, peer: {kind: group, id: -200}}
        """,
        TOKEN="t",
    )
    assert [warning.render("bindings.yaml") for warning in config.warnings] == [
        "bindings.yaml:8: bindings[0].match: no account given, so it matches only the account `default`, which "
        "channels.telegram does not have (accounts: main); add account: <id> or account: '*'"
    ]
