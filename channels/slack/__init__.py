"""The Slack channel: one workspace bot on slack-bolt's AsyncApp, over Socket Mode or HTTP Events, one job a module.
Imported only when a Slack account starts (channels.builtins); these are the names the rest of the code uses."""

from __future__ import annotations

from channels.accounts import SlackAccount
from channels.slack.adapter import CAPABILITIES, SlackAdapter
from channels.slack.blocks import build_blocks
from channels.slack.files import SLACK_FILE_HOST, file_origins
from channels.slack.socket_mode import MAX_BACKOFF_SECONDS
from channels.slack.web_api import DEFAULT_API_BASE_URL, api_url

__all__ = [
    "CAPABILITIES",
    "DEFAULT_API_BASE_URL",
    "MAX_BACKOFF_SECONDS",
    "SLACK_FILE_HOST",
    "SlackAccount",
    "SlackAdapter",
    "api_url",
    "build_blocks",
    "file_origins",
]
