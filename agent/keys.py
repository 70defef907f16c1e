"""API keys per provider, tried in order, with cooldowns after auth failures and rate limits."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

CoolReason = Literal["auth", "rate_limit"]

# What `next_key` returns for a provider configured without keys (a local server): send no key at all.
NO_KEY: Final = ""

DEFAULT_AUTH_COOLDOWN = 60 * 60.0
DEFAULT_RATE_LIMIT_COOLDOWN = 5 * 60.0
DEFAULT_RATE_LIMIT_MAX = 60 * 60.0


def fingerprint(key: str) -> str:
    """A short, stable name for a key that is safe to log: 8 hex digits of its SHA-256 ("none" without a key)."""
    return hashlib.sha256(key.encode()).hexdigest()[:8] if key else "none"


def key_index(keys: Sequence[str], key: str) -> int | None:
    """The key's position in the provider's configured keys (0-based); None for NO_KEY or an unknown key."""
    return keys.index(key) if key and key in keys else None


@dataclass(frozen=True)
class KeyState:
    """Where one key stands: cooling until `until` (pool clock) for `reason`; `streak` consecutive rate limits."""

    until: float
    reason: CoolReason
    streak: int


class KeyPool:
    """Cooldowns of every provider's keys, shared by all runs of a process.

    A provider without keys has one anonymous slot, NO_KEY, which cools like a key: a keyless local server that
    answers 429 is skipped for a while too. Keys are held only as hashes.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        auth_cooldown: float = DEFAULT_AUTH_COOLDOWN,
        rate_limit_cooldown: float = DEFAULT_RATE_LIMIT_COOLDOWN,
        rate_limit_max: float = DEFAULT_RATE_LIMIT_MAX,
    ) -> None:
        self.clock = clock
        self.auth_cooldown = auth_cooldown
        self.rate_limit_cooldown = rate_limit_cooldown
        self.rate_limit_max = rate_limit_max
        self._states: dict[tuple[str, str], KeyState] = {}

    def next_key(self, provider: str, keys: Sequence[str], *, skip: Collection[str] = ()) -> str | None:
        """The first of `keys` neither cooling down nor in `skip`; NO_KEY when the provider has no keys (and its
        slot is free); None when there is nothing to try."""
        for key in keys or [NO_KEY]:
            if key not in skip and self.cooling_for(provider, key) <= 0:
                return key
        return None

    def cool(self, provider: str, key: str, kind: CoolReason, retry_after: float | None = None) -> float:
        """Put a key aside after a failure; returns the cooldown in seconds.

        auth: `auth_cooldown`. rate_limit: the server's Retry-After when it sent one, else `rate_limit_cooldown`
        doubled for each consecutive rate limit of this key (at most `rate_limit_max`) until it succeeds again.
        """
        previous = self._states.get(self._slot(provider, key))
        streak = previous.streak if previous else 0
        if kind == "auth":
            seconds = self.auth_cooldown
        else:
            streak += 1
            doubled = self.rate_limit_cooldown * 2 ** (streak - 1)
            seconds = max(0.0, retry_after) if retry_after is not None else min(doubled, self.rate_limit_max)
        self._states[self._slot(provider, key)] = KeyState(until=self.clock() + seconds, reason=kind, streak=streak)
        return seconds

    def succeeded(self, provider: str, key: str) -> None:
        """The key worked: forget its cooldown and its run of rate limits."""
        self._states.pop(self._slot(provider, key), None)

    def cooling_for(self, provider: str, key: str) -> float:
        """Seconds until the key may be used again; 0 when it may be used now."""
        state = self._states.get(self._slot(provider, key))
        return max(0.0, state.until - self.clock()) if state else 0.0

    def state(self, provider: str, key: str) -> KeyState | None:
        """The key's cooldown record, if it has failed since it last succeeded."""
        return self._states.get(self._slot(provider, key))

    def free_in(self, provider: str, keys: Sequence[str]) -> float:
        """Seconds until the first of `keys` is free again (0 when one is free now)."""
        return min(self.cooling_for(provider, key) for key in keys or [NO_KEY])

    @staticmethod
    @functools.lru_cache(maxsize=1024)  # asked several times a run, for the same few keys
    def _slot(provider: str, key: str) -> tuple[str, str]:
        return provider, hashlib.sha256(key.encode()).hexdigest()


_LOCAL_HOSTS = frozenset({"localhost", "0.0.0.0"})


def needs_key(base_url: str) -> bool:
    """Whether an endpoint wants an API key: any but a server on this machine or the local network (Ollama, vLLM,
    llama.cpp), which needs none."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host in _LOCAL_HOSTS or host.endswith(".localhost"):
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True
    return not (address.is_loopback or address.is_private)


def key_variable(provider: str) -> str:
    """The environment variable that conventionally holds a provider's key: OPENROUTER_API_KEY for openrouter."""
    return f"{provider.upper().replace('-', '_')}_API_KEY"
