"""The Discord channel: one bot account on discord.py, imported only when a Discord account starts (builtins.py).
Other code imports its names from here; each module beside this file does one part of the work."""

# In full: one bot account on the real discord.py Client (gateway WebSocket in, REST out), normalized into
# InboundMessage / ActionEvent; buttons are persistent components whose custom_id is the button's value; files come in
# as attachment URLs fetched from Discord's CDN and go out as multipart uploads; polls and threads are native. The
# account's `health` follows the gateway: stalled when it goes silent or stops acknowledging heartbeats (the
# connection is then left and the session resumed on a new one), degraded in a reconnect storm, whose further
# connections ReconnectGate spaces with exponential backoff (up to 5 minutes, with jitter). Listening is elected per
# gateway shard (channels.base.ElectedIngress): several processes on one token each send, one listens per shard.
#
# The modules, each importing only those listed before it: servers (discord.py on the configured servers), gateway
# (the connection's watchdog: ReconnectGate, heartbeat ACKs, stalls), client (the discord.Client and its gateway
# loop), parsing (SDK events in), sending (messages out), cdn (attachment downloads), errors (DiscordStartError),
# adapter (DiscordAdapter).

from channels.accounts import DiscordAccount
from channels.discord.adapter import DiscordAdapter
from channels.discord.cdn import CDN_HOSTS, DOWNLOAD_CHUNK, cdn_url_allowed
from channels.discord.client import Client
from channels.discord.errors import DiscordStartError
from channels.discord.gateway import BACKOFF_CAP, BACKOFF_FIRST, CONNECT_SECONDS, ReconnectGate
from channels.discord.sending import CAPABILITIES
from channels.discord.servers import RoutedHTTPClient

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "CAPABILITIES",
    "CDN_HOSTS",
    "CONNECT_SECONDS",
    "DOWNLOAD_CHUNK",
    "Client",
    "DiscordAccount",
    "DiscordAdapter",
    "DiscordStartError",
    "ReconnectGate",
    "RoutedHTTPClient",
    "cdn_url_allowed",
]
