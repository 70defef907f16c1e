"""The web tools as the registry gets them: web_fetch, and web_search when BRAVE_API_KEY is set."""

from __future__ import annotations

import os
from collections.abc import Mapping

from tools.base import Tool
from tools.web.fetch import WebFetch
from tools.web.search import BRAVE_BASE_URL, BraveSearch, WebSearch


def web_tools(
    environ: Mapping[str, str] = os.environ,
    *,
    allow_loopback_first_hop: bool = False,
    brave_base_url: str | None = None,
) -> list[Tool]:
    """web_fetch, and web_search when BRAVE_API_KEY is set (without a key the tool is not offered)."""
    tools: list[Tool] = [WebFetch(allow_loopback_first_hop=allow_loopback_first_hop)]
    key = environ.get("BRAVE_API_KEY", "").strip()
    if key:
        tools.append(WebSearch(BraveSearch(key, base_url=brave_base_url or BRAVE_BASE_URL)))
    return tools
