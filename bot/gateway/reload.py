"""Live reload: the running bot notices a changed bindings.yaml (its file looked at about once a second, and
SIGHUP) and applies it to the next message; a broken edit is refused with its errors logged, the old config kept."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bot.config.errors import ConfigError
from bot.config.loading import validate_config
from bot.config.settings import Config
from bot.plugins import Plugins

__all__ = ["RESTART_SECTIONS", "ConfigWatch", "changed_accounts", "needs_restart", "validated"]

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
# What a running bot takes only at start: the admin listener, the MCP servers, pruning, the plugins' own setup.
RESTART_SECTIONS = ("admin", "mcp", "state", "web", "http_api", "webhooks")


def validated(path: Path, state_dir: Path, plugins: Plugins | None = None) -> Config:
    """The config in `path` checked as `bot run` checks it (config.settings.validate_config, with the state directory in
    use: no workspace may hold it or the config); ConfigError when the bot would refuse it. What it would only skip
    or warn about is logged, as at start. `.env` is not read again: it applies from the next start."""
    config, errors, warnings = validate_config(path, plugins=plugins, state_dir=state_dir, env_file=False)
    if config is None:
        raise ConfigError(str(path), errors)
    for issue in [*errors, *warnings]:
        log.warning("%s", issue.render(str(path)))
    return config


def _fingerprint(path: Path) -> str | None:
    """The file's content hash (None when it cannot be read: a save in progress, or removed)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigWatch:
    """Reloads `path` when its content changes (looked at every `poll` seconds) or when `request()` is called
    (SIGHUP); `apply` gets each new config that validates. `load` reads and validates (`validated`). `loaded_at` is
    when the config in use was read; `refused` the errors of the file on disk when it was refused since (at
    `refused_at`), for `bot status`."""

    def __init__(
        self,
        path: Path,
        apply: Callable[[Config], Awaitable[None]],
        *,
        load: Callable[[Path], Config],
        poll: float = POLL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.apply = apply
        self.load = load
        self.poll = poll
        self.clock = clock
        self.loaded_at = clock()  # when the config in use was read (the start, then each reload that applied)
        self.refused: ConfigError | None = None  # the file on disk, refused since (None: the one in use, or fixed)
        self.refused_at: float | None = None
        self._seen = _fingerprint(path)
        self._asked = asyncio.Event()
        self._lock = asyncio.Lock()

    def request(self) -> None:
        """Reload now, whether or not the file looks changed (SIGHUP)."""
        self._asked.set()

    async def run(self) -> None:
        while True:
            with_signal = False
            try:
                async with asyncio.timeout(self.poll):
                    await self._asked.wait()
                with_signal = True
            except TimeoutError:
                pass
            self._asked.clear()
            seen = await asyncio.to_thread(_fingerprint, self.path)
            if seen is None or (seen == self._seen and not with_signal):
                continue
            try:
                await self.reload(seen)
            except Exception:  # a reload that fails half-way must not end the watch
                log.exception("%s: the reload failed; the config in use stays", self.path)

    async def reload(self, seen: str | None = None) -> bool:
        """Read, validate and apply the file now; False (errors logged, nothing changed) for a broken edit."""
        async with self._lock:
            self._seen = seen or await asyncio.to_thread(_fingerprint, self.path)
            try:
                config = await asyncio.to_thread(self.load, self.path)
            except ConfigError as error:
                log.error("%s changed but is not valid; the bot keeps the config it had:\n%s", self.path, error)
                self.refused, self.refused_at = error, self.clock()  # for `bot status` (bot.gateway.status)
                return False
            await self.apply(config)
            self.loaded_at, self.refused, self.refused_at = self.clock(), None, None
            log.info("%s reloaded: it applies from the next message", self.path)
            return True


def _accounts(config: Config) -> dict[tuple[str, str], Any]:
    found: dict[tuple[str, str], Any] = {}
    for channel, section in config.channels.items():
        accounts = section.get("accounts", {}) if isinstance(section, dict) else {}
        for account, settings in (accounts or {}).items():
            found[(channel, str(account))] = settings
    return found


def changed_accounts(old: Config, new: Config) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(the channel accounts to stop: removed or changed, the accounts to start: added or changed)."""
    before, after = _accounts(old), _accounts(new)
    changed = {key for key in before.keys() & after.keys() if before[key] != after[key]}
    return (before.keys() - after.keys()) | changed, (after.keys() - before.keys()) | changed


def needs_restart(old: Config, new: Config) -> list[str]:
    """The sections that changed but take effect only at the next start."""
    return [name for name in RESTART_SECTIONS if getattr(old, name) != getattr(new, name)]
