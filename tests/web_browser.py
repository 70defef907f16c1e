"""A real browser for the web pages' tests: Playwright driving Debian's Chromium (`make test` installs it; Playwright
cannot download its own browsers here), closed with the test, its every request recorded.

    async with chromium() as browser:
        page = await browser.new_page()
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PATIENCE_MS = 30_000  # how long an expectation waits (it returns as soon as it holds): a loaded machine is slow
ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-proxy-server"]  # root in CI: no sandbox
# The screenshots the README shows, kept in docs/screenshots when a test runs with SAVE_SCREENSHOTS=1.
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
IN_README = frozenset({"chat", "approvals"})


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Headless Chromium, stopped (with Playwright's driver) when the block ends."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium package")
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=PATIENCE_MS)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            await browser.close()


async def screenshot(page: Page, name: str, folder: Path) -> Path:
    """A screenshot of the whole page as `name`.png in `folder` (the README's in docs/screenshots too, with
    SAVE_SCREENSHOTS=1)."""
    path = folder / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    if os.environ.get("SAVE_SCREENSHOTS") and name in IN_README:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / f"{name}.png")
    assert path.stat().st_size > 1000, f"the screenshot of {name} is empty"
    return path
