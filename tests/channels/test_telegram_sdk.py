"""python-telegram-bot is imported without `cryptography`, which it loads only for Telegram Passport (8 MiB at
idle): the package is still there for whatever imports it after, and one loaded before is left as it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def probe(code: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_telegram_channel_runs_without_the_passport_package_which_stays_importable() -> None:
    assert probe(
        """
        import sys
        import channels.telegram
        import telegram._bot
        print("cryptography" in sys.modules, telegram._bot.CRYPTO_INSTALLED)
        import cryptography.hazmat.primitives.ciphers  # what the MCP SDK's OAuth uses, after
        print("cryptography" in sys.modules)
        """
    ) == ["False", "False", "True"]


def test_a_passport_package_loaded_before_is_left_as_it_is() -> None:
    assert probe(
        """
        import cryptography
        import channels.telegram
        import telegram._bot
        print(telegram._bot.CRYPTO_INSTALLED)
        """
    ) == ["True"]
