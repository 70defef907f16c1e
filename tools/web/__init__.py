"""The web tools `web_fetch` (a public page as text, SSRF-guarded at connect time) and `web_search` (Brave Search).
guard.py refuses private addresses; response.py and html_text.py read pages for fetch.py; search.py asks Brave."""

from tools.web.fetch import WebFetch
from tools.web.guard import FetchError, GuardedBackend, Refused, address_problem
from tools.web.html_text import html_to_text
from tools.web.search import BraveSearch, SearchBackend, SearchError, SearchHit, WebSearch
from tools.web.toolset import web_tools

__all__ = [
    "BraveSearch",
    "FetchError",
    "GuardedBackend",
    "Refused",
    "SearchBackend",
    "SearchError",
    "SearchHit",
    "WebFetch",
    "WebSearch",
    "address_problem",
    "html_to_text",
    "web_tools",
]
