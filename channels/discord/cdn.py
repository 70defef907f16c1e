"""Attachment downloads: which URLs may be fetched from Discord's CDN, and the session that fetches them."""

from __future__ import annotations

import aiohttp
import yarl

from channels.discord.client import Client

DOWNLOAD_CHUNK = 64 * 1024
# Where attachments live; a ref naming anything else (but the configured test or proxy server) is not fetched.
CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
CDN_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)  # big files may take long in all


def cdn_session(client: Client) -> aiohttp.ClientSession:
    """A session for CDN downloads on discord.py's connector (set at login): its pool and TLS settings, none of
    its headers, so the bot token never goes to the CDN. The adapter closes it; the connector stays the
    client's."""
    return aiohttp.ClientSession(connector=client.http.connector, connector_owner=False, timeout=CDN_TIMEOUT)


def cdn_url_allowed(url: str, api_base_url: str | None) -> bool:
    """Whether an attachment ref may be fetched: Discord's CDN over https, or the configured server (a test fake or
    a proxy, same scheme, host and port). A ref is data from a message: it must not make the bot fetch any URL."""
    try:
        target = yarl.URL(url)
    except (TypeError, ValueError):
        return False
    if not target.absolute or target.user is not None or target.password is not None:
        return False
    if target.scheme == "https" and target.host in CDN_HOSTS and target.port == 443:
        return True
    if api_base_url is None:
        return False
    base = yarl.URL(api_base_url)
    return base.scheme in ("http", "https") and (target.scheme, target.host, target.port) == (
        base.scheme,
        base.host,
        base.port,
    )
