"""How updates arrive: long polling and the webhook server, each with its watchdog."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError

from channels.telegram.constants import ALLOWED_UPDATES, MAX_DELIVERY_ATTEMPTS, MAX_WEBHOOK_BODY, WEBHOOK_READ_SECONDS
from channels.telegram.limits import _loop_time, _retry_seconds
from channels.telegram.parsing import ParsingMixin
from channels.telegram_request import AiohttpRequest

if TYPE_CHECKING:
    from aiohttp import web  # the webhook's server: imported when a webhook starts

log = logging.getLogger("channels.telegram")  # the package's one logger: filters on channels.telegram keep working


class PollWatchdog:
    """Says how long the poller may still wait for a getUpdates before it counts as stalled. The silence runs from
    the start of the first getUpdates after a completed one (the time spent handing updates to the gateway is not
    silence) through failed attempts and their pauses, until one completes; `reset` after a completed getUpdates or
    a new session starts it over, so a server that stays silent costs one new session per `stall_seconds`."""

    def __init__(self, stall_seconds: float, clock: Callable[[], float] = _loop_time) -> None:
        self.stall_seconds = stall_seconds
        self._clock = clock
        self._since: float | None = None  # when the current silence began; None: none is running

    def polling(self) -> float:
        """A getUpdates starts: the seconds left before the poller is stalled (0 when it is already)."""
        if self._since is None:
            self._since = self._clock()
        return max(0.0, self._since + self.stall_seconds - self._clock())

    def reset(self) -> None:
        """A getUpdates completed, or the session was replaced: the next one has a full `stall_seconds`."""
        self._since = None


def _chat_key(raw: dict[str, Any], update_id: int) -> object:
    """The chat an update belongs to, read from the raw JSON; an update without one stands alone."""
    query = raw.get("callback_query")
    for body in (*raw.values(), query.get("message") if isinstance(query, dict) else None):
        if isinstance(body, dict) and isinstance(body.get("chat"), dict):
            return body["chat"].get("id")
    return ("update", update_id)


def _media_group(raw: dict[str, Any]) -> str | None:
    """The media group (album) a raw message update is a part of, if it is one."""
    for key in ("message", "channel_post"):
        body = raw.get(key)
        if isinstance(body, dict) and isinstance(body.get("media_group_id"), str):
            return str(body["media_group_id"])
    return None


Batch = list[tuple[int, dict[str, Any]]]  # (update id, raw update) in the order Telegram sent them


def _messages(updates: Batch) -> list[Batch]:
    """One chat's updates as the messages they make: each update alone, but an album's parts together, in the place
    of its first part."""
    found: list[Batch] = []
    albums: dict[str, Batch] = {}
    for update_id, raw in updates:
        group = _media_group(raw)
        if group is None:
            found.append([(update_id, raw)])
        elif group in albums:
            albums[group].append((update_id, raw))
        else:
            albums[group] = [(update_id, raw)]
            found.append(albums[group])
    return found


class IngressMixin(ParsingMixin):
    """The part of a TelegramAdapter that receives. An update is acknowledged (the next getUpdates offset, or the
    webhook's HTTP answer) only after the gateway has recorded it; the parts of a media group (an album) are recorded
    as one message, and acknowledged together. A poller that hears nothing for `stall_seconds` gets a new HTTP session
    (the watchdog); a webhook that hears nothing for `stall_seconds` while Telegram holds updates for it is set again.
    The account's health is kept in `health`."""

    watchdog: PollWatchdog
    ingress_deferred: bool
    _updates_request: AiohttpRequest
    _offset: int
    _failures: dict[int, int]
    _album_wait: Callable[[], Awaitable[None]]
    _waited_album: str | None
    _task: asyncio.Task[None] | None
    _webhook: web.AppRunner | None
    _webhook_watch: asyncio.Task[None] | None
    _webhook_heard: float

    # --- long polling, elected ----------------------------------------------------------------------------------

    def ingress_keys(self) -> list[str]:
        """Long polling is one process's per token (Telegram answers two pollers with 409); webhooks reach anyone."""
        if self.settings.mode == "webhook":
            return []
        return [f"telegram:{hashlib.sha256(self.settings.token.encode()).hexdigest()[:16]}"]

    async def open_ingress(self, key: str) -> None:
        """Begin long polling (this process won the election for the token)."""
        if self._task is None:
            await self._start_polling()
            log.info("telegram %s: polling (elected)", self.account)

    async def close_ingress(self, key: str) -> None:
        """Stop long polling, confirming what was taken: another process polls from there."""
        await self._stop_polling()

    async def _start_polling(self) -> None:
        await self.bot.delete_webhook(drop_pending_updates=False)
        self._task = asyncio.create_task(self._poll(), name=f"telegram:{self.account}")

    async def _stop_polling(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            # As python-telegram-bot does: one last getUpdates, so Telegram learns the final offset.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self.bot.raw_updates(self._offset, 0)

    # --- receiving ----------------------------------------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 0.5
        while True:
            try:
                updates = await self._updates()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except RetryAfter as error:
                await asyncio.sleep(_retry_seconds(error))
                continue
            except InvalidToken:
                log.error("telegram %s: the bot token was refused; polling stops", self.account)
                self.health.set("degraded", "the bot token was refused; polling stopped")
                return
            except Exception as error:  # NetworkError, TimedOut, Conflict (another poller), a bad answer
                self.health.failed(f"getUpdates: {error}")
                level = logging.ERROR if isinstance(error, Conflict) else logging.WARNING
                log.log(level, "telegram %s: getUpdates failed (%s); retrying in %.1fs", self.account, error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)
                continue
            fresh = self._fresh(updates)
            if not fresh:
                continue
            # An album ending the batch may have parts still on their way: everything before it is delivered and
            # confirmed, the album is not; after a short wait the next getUpdates brings it again with its late
            # parts (Telegram makes an album's updates together, so one wait is enough).
            hold = self._album_to_hold(fresh)
            deliver = fresh if hold is None else fresh[:hold]
            confirm = max(uid for uid, _ in fresh) + 1 if hold is None else fresh[hold][0]
            failed = await self._record_batch(deliver)
            self._offset = max(self._offset, min(failed) if failed else confirm)
            self._failures = {uid: count for uid, count in self._failures.items() if uid >= self._offset}
            if failed:
                await asyncio.sleep(backoff * self._failures.get(min(failed), 1))
            elif hold is not None:
                await self._album_wait()

    async def _updates(self) -> Any:
        """The answer of a getUpdates from the stored offset. One that the watchdog finds stalled is given up, the
        poller's HTTP session replaced, and the same offset asked for again: nothing was confirmed, so nothing is
        lost, and nothing comes twice."""
        while True:
            deadline = asyncio.timeout(self.watchdog.polling())
            try:
                async with deadline:
                    updates = await self.bot.raw_updates(self._offset, self.settings.poll_timeout)
            except TimeoutError:
                if not deadline.expired():
                    raise
                await self._stalled()
                continue
            self.watchdog.reset()
            self.health.heard()
            self.health.set("connected")
            return updates

    async def _stalled(self) -> None:
        """No getUpdates completed for `stall_seconds`: a new HTTP session for the poller (the old connection may
        hang for good without an error), and a full `stall_seconds` before the next check."""
        self.health.set("stalled", f"no getUpdates completed in {self.watchdog.stall_seconds:g}s")
        await self._updates_request.reset()
        self.health.reconnected()
        self.watchdog.reset()
        log.debug("telegram %s: a new HTTP session for getUpdates, from offset %d", self.account, self._offset)

    def _fresh(self, updates: Any) -> Batch:
        """The updates of a getUpdates answer not handled yet, each with its id."""
        if not isinstance(updates, list):
            log.warning("telegram %s: getUpdates answered %s, not a list", self.account, type(updates).__name__)
            return []
        fresh: Batch = []
        for raw in updates:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            if not isinstance(update_id, int):
                log.warning("telegram %s: skipped an update without a numeric update_id", self.account)
            elif update_id >= self._offset:  # lower ones were handled already (a server repeating itself)
                fresh.append((update_id, raw))
        return fresh

    def _album_to_hold(self, fresh: Batch) -> int | None:
        """Where the album that ends the batch starts in it, unless there is none or it was waited for already."""
        album = _media_group(fresh[-1][1])
        if album is None or album == self._waited_album:
            return None
        self._waited_album = album
        return next(index for index, (_, raw) in enumerate(fresh) if _media_group(raw) == album)

    async def _record_batch(self, fresh: Batch) -> list[int]:
        """Hand a batch to the gateway; the ids of the updates that failed (the first of each chat that failed)."""
        # Chats are recorded side by side, each chat's updates in order: a batch of 100 DMs is not 100 journal
        # writes one after the other. A failed update stops its chat, and confirmation stops at the first failed
        # update: Telegram sends the rest again, and the journal drops the ones it has.
        chats: dict[object, Batch] = {}
        for update_id, raw in fresh:
            chats.setdefault(_chat_key(raw, update_id), []).append((update_id, raw))
        failures = await asyncio.gather(*(self._record(_messages(updates)) for updates in chats.values()))
        return [failure for failure in failures if failure is not None]

    async def _record(self, messages: list[Batch]) -> int | None:
        """Hand one chat's messages to the gateway in order; the id of the (first) update of the one that failed."""
        for updates in messages:
            update_id = updates[0][0]
            try:
                await self.handle_updates([raw for _, raw in updates])
            except Exception:
                failures = self._failures.get(update_id, 0) + 1
                self._failures[update_id] = failures
                if failures < MAX_DELIVERY_ATTEMPTS:
                    log.exception("telegram %s: update %d not recorded; retrying", self.account, update_id)
                    return update_id
                # never let one update block the rest for good
                log.exception("telegram %s: update %d failed %d times; skipped", self.account, update_id, failures)
        return None

    # --- webhook ------------------------------------------------------------------------------------------------

    async def _start_webhook(self) -> None:
        from aiohttp import web

        settings = self.settings
        # Any path: a reverse proxy may map the public URL's path to another one; the secret is what admits a post.
        app = web.Application(client_max_size=MAX_WEBHOOK_BODY)
        app.router.add_post("/{path:.*}", self._webhook_request)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._webhook = runner
        await web.TCPSite(runner, settings.webhook_listen, settings.webhook_port).start()
        await self._set_webhook()
        self._webhook_heard = asyncio.get_running_loop().time()
        self._webhook_watch = asyncio.create_task(self._watch_webhook(), name=f"telegram:{self.account}:webhook")

    async def _set_webhook(self) -> None:
        settings = self.settings
        await self.bot.set_webhook(
            url=settings.webhook_url or "", secret_token=settings.webhook_secret, allowed_updates=ALLOWED_UPDATES
        )

    async def _watch_webhook(self) -> None:
        """The webhook's watchdog. Silence alone proves nothing here (nobody may be writing), so after `stall_seconds`
        without a post Telegram is asked (getWebhookInfo) whether it holds updates it has not delivered. If it does,
        the account is degraded and the webhook set again, which makes Telegram try at once instead of after its own
        ever longer retry delay (or at all, after something removed the webhook); the next post makes it connected
        again. With nothing pending, nothing is done."""
        loop = asyncio.get_running_loop()
        stall = self.settings.stall_seconds
        while True:
            await asyncio.sleep(max(0.0, self._webhook_heard + stall - loop.time()))
            if loop.time() - self._webhook_heard < stall:
                continue  # a post came meanwhile
            self._webhook_heard = loop.time()  # the next look a full stall_seconds on, whatever this one finds
            try:
                info = await self.bot.get_webhook_info()
                if not info.pending_update_count:
                    continue
                reason = f"no update for {stall:g}s while Telegram holds {info.pending_update_count} for the webhook"
                if info.last_error_message:
                    reason += f" (its last error: {info.last_error_message})"
                self.health.set("degraded", f"{reason}; setting the webhook again")
                await self._set_webhook()
                self.health.reconnected()
            except TelegramError as error:  # asked again after stall_seconds
                self.health.failed(f"webhook check: {error.message}")

    @property
    def webhook_port(self) -> int | None:
        """The port the webhook listens on (useful with webhook_port 0)."""
        if self._webhook is None or not self._webhook.addresses:
            return None
        return int(self._webhook.addresses[0][1])

    async def _webhook_request(self, request: web.Request) -> web.Response:
        """One POST from Telegram: the secret header, then a JSON update, answered after the gateway returned."""
        from aiohttp import web

        secret = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(secret.encode(), (self.settings.webhook_secret or "").encode()):
            return web.Response(status=403)
        if request.content_type != "application/json" or not request.body_exists:
            return web.Response(status=400)
        try:
            async with asyncio.timeout(WEBHOOK_READ_SECONDS):
                body = await request.read()  # more than client_max_size: aiohttp answers 413
            raw = json.loads(body)
        except (ValueError, TimeoutError) as error:
            log.warning("telegram %s: bad webhook request: %s", self.account, type(error).__name__)
            return web.Response(status=400)
        self.health.heard()
        self._webhook_heard = asyncio.get_running_loop().time()
        self.health.set("connected")  # Telegram reaches the webhook (again)
        if not (isinstance(raw, dict) and isinstance(raw.get("update_id"), int)):
            log.warning("telegram %s: skipped a webhook body that is not an update", self.account)
            return web.Response(status=200)
        # An album's parts come as posts of their own, each answered once recorded: holding one post open for the
        # others could stall them behind it, and answering before recording could lose it. So in webhook mode each
        # part arrives as a message of its own (same media_group_id); polling merges them.
        try:
            await self.handle_update(raw)
        except Exception:  # not recorded: a 500 makes Telegram deliver it again later
            log.exception("telegram %s: webhook update not recorded", self.account)
            return web.Response(status=500)
        return web.Response(status=200)
