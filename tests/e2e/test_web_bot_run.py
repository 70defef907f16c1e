"""The Control UI and WebChat in a real browser (Playwright driving Debian's Chromium: tests/web_browser.py) against a
real `bot run` with the fake LLM: logging in by the link, a streamed answer, a command approved from the chat page and
from the Approvals page, the session's transcript, a job run now, every page's screenshot, and no request to any
host but the bot's; then a refused login, a request without its CSRF token, and what a non-owner's login sees."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from configs import config_dict
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import bot_run, eventually
from playwright.async_api import Page, expect
from web_browser import chromium, screenshot

OWNER_TOKEN = "ann-secret-0123456789abcdef"
GUEST_TOKEN = "bob-secret-0123456789abcdef"
STARTED = "web: the Control UI and WebChat are at"
SESSION = "agent:main:web:direct:ann"


def config(tmp_path: Path, llm: FakeLLM, **extra: Any) -> dict[str, Any]:
    web = {
        "listen": "127.0.0.1:0",
        "tokens": [
            {"name": "ann", "token": OWNER_TOKEN, "owner": "telegram:1"},
            {"name": "bob", "token": GUEST_TOKEN},
        ],
    }
    return config_dict(tmp_path, llm, owners=["telegram:1"], web=web, **extra)


def url_of(folder: Path) -> str:
    """Where the bot's pages are, as its log says."""
    found = re.search(r"web: the Control UI and WebChat are at (http://\S+)", (folder / "bot.log").read_text())
    assert found, "the bot's log names the web address"
    return found.group(1)


async def log_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/#token={token}")
    await expect(page.get_by_role("textbox", name="Message")).to_be_visible()


async def say(page: Page, text: str) -> None:
    await page.get_by_role("textbox", name="Message").fill(text)
    await page.get_by_role("button", name="Send").click()


async def test_an_owner_chats_approves_from_the_chat_and_the_approvals_page_reads_the_transcript_and_runs_a_job(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    workspace = tmp_path / "ws" / "main"  # where the agent's commands may write
    first, second = workspace / "first.txt", workspace / "second.txt"
    jobs = {
        "jobs": [{"id": "digest", "every": "24h", "message": "Write the digest.", "deliver": "web/main:direct:ann"}]
    }
    fake_llm.script(
        Reply.held("Hello from", then=" the agent, <b>bold</b> <script>alert(1)</script>"),
        Reply.tool_calls(ToolCallSpec("exec", {"command": "touch first.txt"})),
        "Ran the first one.",
        Reply.tool_calls(ToolCallSpec("exec", {"command": "touch second.txt"})),
        "Ran the second one.",
        "Here is the digest.",
    )
    async with bot_run(config(tmp_path, fake_llm, cron=jobs), tmp_path, STARTED), chromium() as browser:
        url = url_of(tmp_path)
        page = await browser.new_page()
        hosts: set[str] = set()
        page.on("request", lambda request: hosts.add(request.url.split("/")[2]))
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await log_in(page, url, OWNER_TOKEN)
        assert "#token" not in page.url  # the secret left the address bar at once
        loaded = "performance.getEntries().reduce((sum, entry) => sum + (entry.decodedBodySize || 0), 0)"
        assert 0 < await page.evaluate(loaded) < 150_000  # the first load: the page, its style and its script
        messages = page.locator("#messages")

        # A streamed answer: the part written so far shows while the model is still writing. A file goes with the
        # message, into the agent's inbox.
        notes = tmp_path / "notes.txt"
        notes.write_text("the notes")
        await page.get_by_label("Attach files").set_input_files(str(notes))
        await say(page, "hello <img src=x onerror=alert(2)>")
        await expect(messages).to_contain_text("hello <img src=x onerror=alert(2)>")  # shown as text
        await expect(messages).to_contain_text("Hello from")
        await eventually(lambda: fake_llm.holding == 1, "the answer to be held half-written")
        await expect(messages).not_to_contain_text("the agent")
        fake_llm.release()
        await expect(messages).to_contain_text("Hello from the agent, <b>bold</b> <script>alert(1)</script>")
        [inboxed] = list((workspace / "inbox").rglob("notes.txt"))
        assert inboxed.read_text() == "the notes"

        # A command approved on its card in the chat.
        await say(page, "run the first command")
        card = page.locator("li.message", has=page.get_by_role("button", name="Allow once"))
        await expect(card).to_contain_text("touch first.txt")
        await expect(card.get_by_role("button", name="Allow always")).to_be_visible()
        await expect(card.get_by_role("button", name="Deny")).to_be_visible()
        await screenshot(page, "chat", tmp_path)
        await card.get_by_role("button", name="Allow once").click()
        await expect(messages).to_contain_text("Ran the first one.")
        assert first.exists()

        # A command approved on the Approvals page.
        await say(page, "run the second command")
        await expect(page.get_by_role("button", name="Allow once")).to_be_visible()
        await page.get_by_role("link", name="Approvals").click()
        pending = page.locator("li.card", has_text="touch second.txt")
        await expect(pending).to_be_visible()
        await screenshot(page, "approvals", tmp_path)
        await pending.get_by_role("button", name="Allow once").click()
        await expect(page.locator("table")).to_contain_text("touch second.txt")  # among the decided
        await eventually(second.exists, "the second command to run")
        await page.get_by_role("link", name="Chat").click()
        await expect(page.locator("#messages")).to_contain_text("Ran the second one.")

        # The session's transcript, Markdown rendered safely, each tool call on a line of its own.
        await page.get_by_role("link", name="Sessions").click()
        await screenshot(page, "sessions", tmp_path)
        await page.get_by_role("link", name=SESSION).click()
        transcript = page.locator("ol.transcript")
        await expect(transcript).to_contain_text("run the first command")
        await expect(transcript.locator("li.tool summary").first).to_contain_text("exec")
        await expect(transcript).to_contain_text("<script>alert(1)</script>")  # as text, never as a tag
        await screenshot(page, "transcript", tmp_path)

        # A job run now: its answer comes to the chat it delivers to.
        await page.get_by_role("link", name="Jobs").click()
        row = page.locator("tr", has_text="digest")
        await expect(row).to_contain_text("24h")
        await screenshot(page, "jobs", tmp_path)
        await row.get_by_role("button", name="Run now").click()
        await expect(page.locator(".notice")).to_contain_text("digest: asked to run now")
        await page.get_by_role("link", name="Chat").click()
        await expect(page.locator("#messages")).to_contain_text("Here is the digest.")

        for name in ("Channels", "Usage", "Config"):
            await page.get_by_role("link", name=name).click()
            await expect(page.get_by_role("heading", level=1)).to_have_text(name)
            await screenshot(page, name.lower(), tmp_path)
        config_text = await page.locator("pre.config").inner_text()
        assert "name: ann" in config_text and OWNER_TOKEN not in config_text and GUEST_TOKEN not in config_text
        await expect(page.locator("body")).to_contain_text("The file on disk is valid")
        await page.get_by_role("link", name="Usage").click()
        await expect(page.get_by_role("img", name="Tokens per day")).to_be_visible()

    assert dialogs == []  # no script from a message ever ran
    assert hosts == {url.split("/")[2]}  # the pages asked nothing of any other host


async def test_a_wrong_link_a_request_without_its_csrf_token_and_a_non_owners_view_are_refused(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script("Hello Ann.", "Hello Bob.")
    async with bot_run(config(tmp_path, fake_llm), tmp_path, STARTED), chromium() as browser:
        url = url_of(tmp_path)
        stranger = await browser.new_page()
        await stranger.goto(f"{url}/#token=not-the-secret-at-all")
        await expect(stranger.get_by_role("alert")).to_contain_text("That login link is not valid")
        await screenshot(stranger, "login", tmp_path)
        response = await stranger.request.get(f"{url}/sessions")
        assert response.status == 401

        ann = await browser.new_page()
        await log_in(ann, url, OWNER_TOKEN)
        await say(ann, "hi, I am Ann")
        await expect(ann.locator("#messages")).to_contain_text("Hello Ann.")
        # The same form posted without its CSRF token (the cookie alone): refused, nothing journaled or answered.
        forged = await ann.request.post(f"{url}/chat/main/send", form={"text": "forged"})
        assert forged.status == 403
        asked = len(fake_llm.requests)

        bob = await (await browser.new_context()).new_page()
        await log_in(bob, url, GUEST_TOKEN)
        nav = bob.get_by_role("navigation", name="Main")
        await expect(nav.get_by_role("link", name="Chat")).to_be_visible()
        for hidden in ("Approvals", "Channels", "Usage", "Config"):
            await expect(nav.get_by_role("link", name=hidden)).to_have_count(0)
        assert (await bob.request.get(f"{url}/config")).status == 403
        assert (await bob.request.get(f"{url}/sessions/{SESSION}")).status == 404  # Ann's: as if none
        await say(bob, "hi, I am Bob")
        await expect(bob.locator("#messages")).to_contain_text("Hello Bob.")
        await bob.get_by_role("link", name="Sessions").click()
        sessions = bob.locator("table")
        await expect(sessions).to_contain_text("agent:main:web:direct:bob")
        await expect(sessions).not_to_contain_text(SESSION)
        await screenshot(bob, "non-owner-sessions", tmp_path)
        await bob.get_by_role("link", name="Chat").click()
        await bob.get_by_role("button", name="New conversation").click()
        await expect(bob.locator("#messages")).to_contain_text("Started a new conversation.")
    assert asked == 1  # the forged message never reached the model
    assert "forged" not in str([request.body for request in fake_llm.requests])
