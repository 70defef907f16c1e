"""Routing throughput: resolutions per second with 10, 1,000 and 10,000 bindings, on one core,
and the start-up cost of loading a bindings.yaml of those sizes.

Run with `make bench` or `.venv/bin/python bench/routing.py`. Each binding set mixes every tier
(peers, wildcards, guild roles, guilds, teams, accounts, channel-wide); the inputs hit each tier and
miss to the default, so the figure is an average over realistic lookups, not a best case.
"""

from __future__ import annotations

import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from bot.config.loading import parse_config  # noqa: E402
from routing import Binding, Peer, Router, RoutingInput  # noqa: E402

CHANNELS = ("telegram", "discord", "slack")


def make_bindings(count: int, rng: random.Random) -> list[Binding]:
    bindings = []
    for index in range(count):
        agent = f"agent{index % 50}"
        shape = index % 8
        if shape in (0, 1, 2):
            kind = "direct" if shape == 0 else "group"
            bindings.append(Binding(agent, "telegram", peer=Peer(kind, str(-1_000_000_000_000 - index))))
        elif shape == 3:
            bindings.append(Binding(agent, "discord", guild=str(index), roles=(f"r{index}", f"r{index + 1}")))
        elif shape == 4:
            bindings.append(Binding(agent, "discord", guild=str(index)))
        elif shape == 5:
            bindings.append(Binding(agent, "slack", team=f"T{index}"))
        elif shape == 6:
            bindings.append(Binding(agent, rng.choice(CHANNELS), account=f"acct{index}"))
        else:
            bindings.append(Binding(agent, "discord", account="*", peer=Peer("channel", str(index))))
    bindings.append(Binding("fallback", "slack", account="*"))
    return bindings


def make_inputs(count: int, rng: random.Random, size: int = 5_000) -> list[RoutingInput]:
    inputs = []
    for _ in range(size):
        index = rng.randrange(count + count // 4 + 1)  # a fifth of the inputs match nothing specific
        shape = index % 8
        if shape in (0, 1, 2):
            kind = "direct" if shape == 0 else "group"
            inputs.append(RoutingInput("telegram", peer=Peer(kind, str(-1_000_000_000_000 - index))))
        elif shape in (3, 4):
            roles = (f"r{index}", "x") if shape == 3 else ("x",)
            inputs.append(RoutingInput("discord", peer=Peer("channel", "c1"), guild=str(index), member_roles=roles))
        elif shape == 5:
            inputs.append(RoutingInput("slack", peer=Peer("channel", "C1"), team=f"T{index}", thread="1700000000.1"))
        elif shape == 6:
            inputs.append(RoutingInput(rng.choice(CHANNELS), account=f"acct{index}", peer=Peer("direct", "u1")))
        else:
            inputs.append(RoutingInput("discord", account="bot2", peer=Peer("channel", str(index))))
    return inputs


def per_second(one_pass: Callable[[], object], per_pass: int, seconds: float = 1.0) -> float:
    """Repeat `one_pass` (which handles `per_pass` inputs) for about `seconds`; inputs handled per second."""
    done = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        one_pass()
        done += per_pass
    return done / elapsed


def config_text(count: int) -> str:
    lines = ["agents: [{id: main, default: true}, {id: ops}]", "bindings:"]
    for index in range(count):
        lines += [
            "  - agent: ops",
            "    match:",
            "      channel: telegram",
            f"      peer: {{kind: group, id: {-1_000_000_000_000 - index}}}",
        ]
    return "\n".join(lines) + "\n"


def measure(count: int) -> str:
    """One row of the table: build time, index memory and three rates for `count` bindings."""
    rng = random.Random(count)
    bindings = make_bindings(count, rng)
    inputs = make_inputs(count, rng)
    fields = [(i.channel, i.account, i.peer, i.guild, i.team, i.member_roles, i.thread) for i in inputs]
    tracemalloc.start()
    start = time.perf_counter()
    router = Router(bindings, default_agent="main", identity_links={"alice": ["telegram:u1"]})
    build_ms = (time.perf_counter() - start) * 1000
    index_kib = tracemalloc.get_traced_memory()[0] / 1024
    tracemalloc.stop()

    def resolve_all() -> None:
        for item in inputs:
            router.resolve(item)

    def match_all() -> None:
        for item in inputs:
            router.match(item)

    def build_and_resolve_all() -> None:
        for channel, account, peer, guild, team, roles, thread in fields:
            router.resolve(RoutingInput(channel, account, peer, None, guild, team, roles, thread))

    resolved = per_second(resolve_all, len(inputs))
    matched = per_second(match_all, len(inputs))
    with_input = per_second(build_and_resolve_all, len(inputs))
    return f"{count:>9,} {build_ms:>9.1f} {index_kib:>10,.0f} {resolved:>12,.0f} {matched:>13,.0f} {with_input:>10,.0f}"


def main() -> None:
    print(f"Python {sys.version.split()[0]}, one core, {len(make_inputs(10, random.Random(0)))} mixed inputs per pass")
    print(f"{'bindings':>9} {'build ms':>9} {'index KiB':>10} {'resolve/s':>12} {'match only/s':>13} {'+input/s':>10}")
    for count in (10, 1_000, 10_000):
        print(measure(count))
    print()
    print("Loading bindings.yaml (parse, ${VAR} substitution, validation) and building the router index:")
    print(f"{'bindings':>9} {'lines':>7} {'load ms':>9} {'router ms':>10}")
    for count in (10, 1_000, 10_000):
        text = config_text(count)
        start = time.perf_counter()
        config = parse_config(text, environ={})
        loaded = time.perf_counter()
        config.router()
        routed = time.perf_counter()
        print(
            f"{count:>9,} {text.count(chr(10)):>7,} {(loaded - start) * 1000:>9.1f} {(routed - loaded) * 1000:>10.1f}"
        )


if __name__ == "__main__":
    main()
