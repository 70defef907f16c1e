"""python-telegram-bot, imported without the `cryptography` package: the first thing this package does."""

from __future__ import annotations

import sys


def import_sdk() -> None:
    """Import python-telegram-bot without `cryptography`. PTB loads that package (8 MiB and 20 ms at start) only to
    decrypt Telegram Passport data, with a private key the bot never gives it, and treats it as its optional
    `passport` extra: without it PTB runs as if that extra were not installed. What imports `cryptography` later
    (the MCP SDK) still finds it; when something has loaded it already, PTB is imported as it is."""
    if "telegram" in sys.modules or "cryptography" in sys.modules:
        return
    sys.modules["cryptography"] = None  # type: ignore[assignment]  # meanwhile an import of it is an ImportError
    try:
        import telegram.ext  # noqa: F401
    finally:
        del sys.modules["cryptography"]


import_sdk()
