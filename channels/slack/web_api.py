"""The Web API client of one account (slack_sdk's, with retries and health reports) and how its errors read."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from channels.accounts import SlackAccount
from channels.health import ChannelHealth

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    from slack_sdk.http_retry.async_handler import AsyncRetryHandler
    from slack_sdk.http_retry.request import HttpRequest
    from slack_sdk.http_retry.response import HttpResponse
    from slack_sdk.http_retry.state import RetryState
    from slack_sdk.web.async_client import AsyncWebClient

DEFAULT_API_BASE_URL = "https://slack.com"
# apps.connections.open errors that no retry mends: the app token is wrong, revoked or not an app-level token.
REFUSED = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked", "not_allowed_token_type"})


def api_url(base: str | None) -> str:
    """The Web API root for `api_base_url` (a server root, as for the other channels)."""
    return (base or DEFAULT_API_BASE_URL).rstrip("/") + "/api/"


def _rate_limit_retries(sleep: Callable[[float], Awaitable[None]]) -> AsyncRetryHandler:
    """slack_sdk's retry of a 429 (three times at most, each after Retry-After seconds and up to one more), waiting
    with `sleep`."""
    from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler

    class RateLimitRetries(AsyncRateLimitErrorRetryHandler):
        async def prepare_for_next_attempt_async(
            self,
            *,
            state: RetryState,
            request: HttpRequest,
            response: HttpResponse | None = None,
            error: Exception | None = None,
        ) -> None:
            if response is None:
                raise error or RuntimeError("slack: a retry without a response")
            state.next_attempt_requested = True
            retry_after = next((value for name, value in response.headers.items() if name.lower() == "retry-after"), [])
            await sleep((int(retry_after[0]) if retry_after else 1) + random.random())
            state.increment_current_attempt()

    return RateLimitRetries(max_retry_count=3)


def web_client(
    settings: SlackAccount, health: ChannelHealth, sleep: Callable[[float], Awaitable[None]]
) -> AsyncWebClient:
    """slack_sdk's Web API client at `api_base_url`, retrying dropped connections and 429s, telling `health` how each
    call went: reached when Slack answered (with an error too, which is remembered), failed when it could not be."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
    from slack_sdk.web.async_client import AsyncWebClient
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

    class ReportingClient(AsyncWebClient):
        async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
            try:
                response = await super().api_call(api_method, **kwargs)
            except SlackApiError as error:
                health.reached()
                health.failed(f"{api_method}: {describe(error)}")
                raise
            except Exception as error:
                health.failed(f"{api_method}: {describe(error)}")
                raise
            health.reached()
            return response

    return ReportingClient(
        token=settings.bot_token.get_secret_value(),
        base_url=api_url(settings.api_base_url),
        retry_handlers=[AsyncConnectionErrorRetryHandler(), _rate_limit_retries(sleep)],
    )


def describe(error: BaseException) -> str:
    from slack_sdk.errors import SlackApiError

    if isinstance(error, SlackApiError):  # a body that is not JSON (a wrong URL's 404 page) has no error field
        data = error.response.data
        return str(data.get("error")) if isinstance(data, dict) else f"HTTP {error.response.status_code}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
