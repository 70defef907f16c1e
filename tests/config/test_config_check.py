"""`bot config check` catches what `bot run` would refuse or skip, with file, line and key path: the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import LOCAL, bot, environment, write

from bot.app import App
from bot.config.loading import validate_config
from bot.config.settings import Match
from routing import Peer, RoutingInput

ROOT = Path(__file__).parent.parent.parent


def test_a_local_provider_needs_no_key(tmp_path: Path) -> None:
    path = write(tmp_path, "defaults: {model: ollama/llama3.1}\nproviders:\n  ollama:\n    kind: openai\n"
                 "    base_url: http://localhost:11434/v1\n")  # fmt: skip
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 0, check.stderr
    assert check.stderr == ""


# (what, the config, the warning `config check` prints; it still exits 0)
WARNINGS: list[tuple[str, str, str]] = [
    ("a tool name with a typo", LOCAL + "tools:\n  allow: [web_serch]\n",
     ":4: tools.allow[0]: 'web_serch' names no known tool or group, so it matches nothing; did you mean 'web_search'?"),
    ("a group with a typo", LOCAL + "tools:\n  deny:\n    - group:runtim\n",
     ":5: tools.deny[0]: 'group:runtim' names no known tool or group, so it matches nothing; "
     "did you mean 'group:runtime'?"),
    ("by_group", LOCAL + "tools:\n  by_group:\n    'telegram:group:*': {deny: [exce]}\n",
     ":5: tools.by_group.telegram:group:*.deny[0]: 'exce' names no known tool"),
    ("by_provider", LOCAL + "tools:\n  by_provider:\n    local: {allow: [raed]}\n",
     ":5: tools.by_provider.local.allow[0]: 'raed' names no known tool"),
    ("non_owner", LOCAL + "tools:\n  non_owner: {deny: [wirte]}\n",
     ":4: tools.non_owner.deny[0]: 'wirte' names no known tool or group, so it matches nothing; did you mean 'write'?"),
    ("subagent", LOCAL + "tools:\n  subagent: {deny: ['group:automaton']}\n",
     ":4: tools.subagent.deny[0]: 'group:automaton' names no known tool"),
    ("an agent's own list", LOCAL + "agents:\n  - id: main\n    tools: {allow: [grpe]}\n",
     ":5: agents[0].tools.allow[0]: 'grpe' names no known tool or group, so it matches nothing; did you mean 'grep'?"),
    ("an account no channel defines",
     LOCAL + "channels:\n  telegram:\n    accounts:\n      main: {token: '1:x'}\n"
     "bindings:\n  - agent: main\n    match: {channel: telegram, account: mian, peer: {kind: direct, id: '1'}}\n",
     ":9: bindings[0].match.account: no account 'mian' under channels.telegram.accounts; did you mean 'main'?"),
    ("a channel without accounts",
     LOCAL + "bindings:\n  - agent: main\n    match: {channel: discord, account: '*'}\n",
     ":5: bindings[0].match.channel: channels.discord defines no account, so this binding matches nothing"),
    ("a binding without account on a channel without `default`",
     LOCAL + "channels:\n  telegram:\n    accounts:\n      main: {token: '1:x'}\n"
     "bindings:\n  - agent: main\n    match: {channel: telegram, peer: {kind: group, id: '-100'}}\n",
     ":9: bindings[0].match: no account given, so it matches only the account `default`"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "text", "expected"), WARNINGS, ids=[case[0] for case in WARNINGS])
def test_names_that_match_nothing_are_warnings_with_their_line(
    tmp_path: Path, what: str, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 0, (what, check.stderr)
    assert f"warning: {path}{expected}" in check.stderr, (what, check.stderr)


def test_known_names_globs_and_mcp_servers_draw_no_warning(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        LOCAL + "tools:\n  allow: [exec, 'web_*', 'group:fs', 'mcp:docs', docs__search, '*']\n"
        "mcp:\n  servers:\n    docs: {url: 'http://127.0.0.1:9/mcp'}\n",
    )
    config, errors, warnings = validate_config(path, environ={})
    assert config is not None and errors == [] and warnings == []


def test_an_allow_list_written_when_it_limited_non_owners_is_refused_with_its_line(tmp_path: Path) -> None:
    # `allow` used to limit non-owners (and subagents) to what it named; it now lifts entries of the default deny
    # list, so such a list would give more than it did: the bot refuses it and says to write `only:`.
    path = write(tmp_path, LOCAL + "tools:\n  non_owner:\n    allow: [read, exec]\n  subagent: {allow: [read]}\n")
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 1, check.stderr
    assert (
        f"{path}:5: tools.non_owner.allow[0]: 'read' is not in the non-owner default deny list (group:runtime, write, "
        "edit, memory_write, group:mcp, group:automation, group:sessions), so allowing it changes nothing: allow only "
        "lifts entries of that list; to limit non-owners to some tools, as allow did before, list them under only:"
    ) in check.stderr
    assert f"{path}:6: tools.subagent.allow[0]: 'read' is not in the subagent default deny list" in check.stderr
    assert "allow[1]" not in check.stderr  # exec is denied by default: allowing it lifts it
    fixed = write(tmp_path, LOCAL + "tools:\n  non_owner: {only: [read, exec], allow: [exec]}\n")
    assert bot("config", "check", "--config", str(fixed)).returncode == 0


def test_a_console_binding_needs_no_console_account(tmp_path: Path) -> None:
    binding = "bindings:\n  - agent: main\n    match: {channel: console, peer: {kind: direct, id: '*'}}\n"
    path = write(tmp_path, LOCAL + binding)
    assert validate_config(path, environ={})[1:] == ([], [])  # `bot chat` routes through it


def test_validate_config_returns_issues_with_file_line_path_and_suggestion(tmp_path: Path) -> None:
    account = "channels:\n  telegram:\n    accounts:\n      main: {token: '1:x', dm_polcy: open}\n"
    path = write(tmp_path, LOCAL + account)
    config, errors, warnings = validate_config(path, environ={})
    assert config is None and warnings == []
    [issue] = errors
    assert (issue.file, issue.line, issue.path) == (str(path), 6, "channels.telegram.accounts.main.dm_polcy")
    assert issue.did_you_mean == "dm_policy" and issue.fatal


def test_an_unset_token_is_an_error_the_bot_starts_without(tmp_path: Path) -> None:
    path = write(tmp_path, LOCAL + "channels:\n  telegram:\n    accounts:\n      main: {token: '${SB_TEST_TOKEN}'}\n")
    config, errors, _ = validate_config(path, environ={})
    assert config is not None  # `bot run` starts, without this account
    assert [(issue.line, issue.fatal) for issue in errors] == [(6, False)]
    assert config.unset_credentials("telegram", "main") == ["SB_TEST_TOKEN"]


# --- .env beside the config ------------------------------------------------------------------------------------------


def test_dotenv_beside_the_config_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    path = write(tmp_path, "defaults: {model: '${SB_TEST_MODEL}'}\n"
                 "providers: {local: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}}\n")  # fmt: skip
    (tmp_path / ".env").write_text("# comments and export work as in a shell\nexport SB_TEST_MODEL=local/from-dotenv\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    from_file = bot("tools", "--config", str(path), cwd=elsewhere)  # beside the config, not the current folder
    assert from_file.returncode == 0, from_file.stderr
    assert "model: local/from-dotenv" in from_file.stdout
    assert bot("config", "check", "--config", str(path), cwd=elsewhere).returncode == 0
    won = bot("tools", "--config", str(path), env=environment(SB_TEST_MODEL="local/from-env"))
    assert "model: local/from-env" in won.stdout
    config, errors, _ = validate_config(path, environ={"SB_TEST_MODEL": "local/given"})
    assert errors == [] and config is not None and config.defaults.model == "local/given"
    (tmp_path / ".env").unlink()
    missing = bot("config", "check", "--config", str(path), cwd=elsewhere)
    assert missing.returncode == 1
    assert f"{path}:1: defaults.model: environment variable ${{SB_TEST_MODEL}} is not set" in missing.stderr


def test_dotenv_supplies_a_token_to_bot_run(tmp_path: Path) -> None:
    path = write(tmp_path, LOCAL + "channels:\n  telegram:\n    accounts:\n      main: {token: '${SB_TEST_TOKEN}'}\n")
    (tmp_path / ".env").write_text("SB_TEST_TOKEN=123:from-dotenv\n")
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 0, check.stderr


# --- the shipped example ---------------------------------------------------------------------------------------------

DUMMIES = {"TELEGRAM_BOT_TOKEN": "123456:dummy", "OPENROUTER_API_KEY": "sk-or-dummy"}


def _message_for(match: Match, accounts: list[str]) -> RoutingInput:
    """A message that the binding's match describes (a concrete id where it says "*")."""
    account = match.account or "default"
    peer = match.peer_value
    return RoutingInput(
        channel=match.channel,
        account=accounts[0] if account == "*" else account,
        peer=Peer(peer.kind, "4242" if peer.id == "*" else peer.id) if peer else None,
        guild=match.guild,
        team=match.team,
        member_roles=tuple(match.roles or ()),
    )


def test_the_shipped_example_is_clean_and_bot_route_agrees_with_the_running_router(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    shutil.copy(ROOT / "bindings.example.yaml", path)
    env = environment(**DUMMIES)
    check = bot("config", "check", "--config", str(path), env=env)
    assert check.returncode == 0, check.stderr
    assert check.stderr == "", "the example draws no warning"
    config, errors, warnings = validate_config(path, environ=DUMMIES)
    assert config is not None and errors == [] and warnings == []
    router = App(config, tmp_path / "state").decisions.router  # what `bot run` routes with
    assert config.bindings
    for index, binding in enumerate(config.bindings):
        accounts = list(config.channels[binding.match.channel]["accounts"])
        assert binding.match.account in ("*", *accounts), f"bindings[{index}] matches an account the file defines"
        message = _message_for(binding.match, accounts)
        args = ["route", "--config", str(path), "--channel", message.channel, "--account", message.account, "--json"]
        args += ["--peer", f"{message.peer.kind}:{message.peer.id}"] if message.peer else []
        args += ["--guild", message.guild] if message.guild else []
        args += ["--team", message.team] if message.team else []
        args += ["--roles", ",".join(message.member_roles)] if message.member_roles else []
        shown = bot(*args, env=env)
        assert shown.returncode == 0, shown.stderr
        resolved = router.resolve(message)
        expected = {"agent": resolved.agent, "session_key": resolved.session_key, "matched_by": resolved.matched_by}
        assert json.loads(shown.stdout) == expected
        assert resolved.agent == binding.agent, f"bindings[{index}] routes its own message to {binding.agent}"


def test_every_agent_of_the_example_can_use_what_its_settings_give_it(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    shutil.copy(ROOT / "bindings.example.yaml", path)
    config, errors, _ = validate_config(path, environ=DUMMIES)
    assert config is not None and errors == []
    app = App(config, tmp_path / "state")
    for binding in config.bindings:
        agent = config.agent(binding.agent)
        peer = binding.match.peer_value
        if peer is None or not agent.exec.allowlist:
            continue
        here = Peer(peer.kind, "4242" if peer.id == "*" else peer.id)
        names = app.policy(agent.id, binding.match.channel, peer=here, owner=True).names
        assert "exec" in names, f"{agent.id}'s exec settings apply where it is bound ({binding.match.channel} {here})"


# --- a missing model key ---------------------------------------------------------------------------------------------


def test_a_missing_model_key_is_named_as_missing_not_as_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "defaults: {model: remote/m, workspace_root: ws}\nproviders:\n  remote:\n    kind: openai\n"
                 "    base_url: https://api.example.invalid/v1\n    api_key: ${SB_TEST_REMOTE_KEY:-}\n")  # fmt: skip
    chat = bot("chat", "--config", str(path), "-m", "hi")
    assert chat.returncode == 1
    line = f"{path}:6: providers.remote.api_key: provider 'remote' has no API key: set SB_TEST_REMOTE_KEY"
    assert line in chat.stderr
    assert "no API key is set up" in chat.stderr
    assert "refused" not in chat.stderr and "cooling" not in chat.stderr


def test_an_owner_on_a_channel_that_does_not_exist_is_refused_with_the_one_meant(tmp_path: Path) -> None:
    path = write(tmp_path, LOCAL + "owners: [telegram:7, telgram:8, web:ann]\n")
    config, errors, _ = validate_config(path, environ={})
    assert config is None  # approvals would wait for nobody: refused, not skipped
    assert [issue.render(str(path)) for issue in errors] == [
        f"{path}:3: owners[1]: telgram:8: there is no channel 'telgram'; did you mean 'telegram'?"
    ]
