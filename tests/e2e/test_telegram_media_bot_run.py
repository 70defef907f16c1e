"""Albums, uploads, polls and topics on Telegram through a real `bot run` process (issue 15): the real adapter on the
fake Bot API (and its file server), a model that can see on the fake LLM. What only Telegram has: an album is one
message, a turn run again after a SIGKILL takes its files from the inbox (and refuses once), and the agent uploads a
picture and a document of its workspace (each by its own method), makes a forum topic and posts a native poll. What
every platform does with the files a person sends (a photo, hostile names, a voice note, a file over the limit) is in
tests/e2e/test_media_bot_run.py; tests/turns/test_media.py proves the same behaviours on the in-memory channel,
tests/channels/test_telegram_media.py the adapter's own download, upload, poll and topic paths."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import (
    bot_run,
    eventually,
    files_under,
    finished,
    inbox_of,
    launch_bot,
    read_state,
    tool_result,
    user_images,
    user_parts,
    user_text,
)

STARTED = "channel telegram account main started"

OWNER = 1001  # the fake's default private sender (tg.user_id): its DM chat has the same id
PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # JPEG-ish bytes, 10,244 of them: "10.2 KB"
# A PNG: its signature, an IHDR chunk for a 1x1 picture, and bytes enough that it is clearly not the thumbnail.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00" + bytes(range(200))


def config(
    tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, *, limits: dict[str, int] | None = None, **media: Any
) -> dict[str, Any]:
    """A bot with one Telegram account (`limits` as its `media`), an agent on a model that can see, days in UTC."""
    account: dict[str, Any] = {"streaming": "off"} | ({"media": limits} if limits is not None else {})
    binding = {"agent": "main", "match": {"channel": "telegram", "account": "main"}}
    defaults = {"model": "fake/gpt-4o", "timezone": "UTC"}
    owners = [f"telegram:{OWNER}"]
    return config_dict(
        tmp_path, llm, telegram(tg, **account), defaults=defaults, owners=owners, bindings=[binding], media=media
    )


@contextlib.asynccontextmanager
async def running(config: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None) -> AsyncIterator[Path]:
    """`bot run` on `config`; yields its state directory. Stopped (exit 0) at the end."""
    async with bot_run(config, tmp_path, STARTED, env=env) as path:
        yield path.parent / "state"


async def wait_said(tg: FakeTelegram, chat_id: int, count: int) -> list[str]:
    """The bot's messages in one chat as they are shown (after entity parsing), once there are `count` of them."""
    return await tg.wait_texts(chat_id, lambda texts: len(texts) >= count)


def served_path(tg: FakeTelegram, update: dict[str, Any], kind: str) -> str:
    """Where the fake's file server serves the file an update carries (a photo's largest size)."""
    item = update["message"][kind]
    return tg.files[(item[-1] if kind == "photo" else item)["file_id"]].path


async def test_an_album_is_one_message_to_the_model_with_both_images_and_both_lines(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    second = bytes(reversed(PHOTO))
    fake_llm.script("Two fine views.")
    async with running(config(tmp_path, fake_llm, tg), tmp_path) as state:
        album = await tg.media_group([("photo", PHOTO, "our trip"), ("photo", second, "")])
        [answer] = await wait_said(tg, OWNER, 1)
        await finished(state)
        day = inbox_of(state)  # one message in the bot's journal for the two parts
        [(message_id,)] = read_state(state, "SELECT message_id FROM inbound")

    assert answer == "Two fine views."
    assert message_id == str(album[0]["message"]["message_id"])  # the album is known by its first part
    assert len(fake_llm.requests) == 1  # one turn for the album
    folder = day.removeprefix("inbox/")
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {
        f"{folder}/photo.jpg": PHOTO,
        f"{folder}/photo (2).jpg": second,
    }
    assert [part["type"] for part in user_parts(fake_llm)] == ["text", "image_url", "image_url"]
    assert user_images(fake_llm) == [PHOTO, second]
    assert user_text(fake_llm).splitlines() == [
        "our trip",
        f"[image (10.2 KB), saved as {day}/photo.jpg]",
        f"[image (10.2 KB), saved as {day}/photo (2).jpg]",
    ]
    assert sorted(tg.downloads) == sorted(served_path(tg, part, "photo") for part in album)


async def test_the_agent_uploads_a_picture_and_a_document_of_its_workspace_with_the_text_as_the_caption(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    workspace = tmp_path / "ws" / "main"
    (workspace / "reports").mkdir(parents=True)
    chart, report = workspace / "chart.png", workspace / "reports" / "q3.pdf"
    chart.write_bytes(PNG)
    report.write_bytes(b"%PDF-1.7 quarterly " + bytes(range(256)))
    media = ["chart.png", "reports/q3.pdf"]
    send = ToolCallSpec("message", {"action": "send", "text": "The report.", "media": media})
    fake_llm.script(Reply.tool_calls(send), "NO_REPLY")
    async with running(config(tmp_path, fake_llm, tg), tmp_path) as state:
        await tg.private_message("send me the q3 report with its chart", user_id=OWNER)
        await tg.wait_uploads(2)
        await eventually(lambda: len(fake_llm.requests) == 2, "the model to read the tool's result")
        await finished(state)

    # A photo and a document never share an album: each goes by its own method, the text on the first as its caption.
    photo, document = tg.uploads
    assert (photo.method, photo.chat_id, photo.filename, photo.data, photo.caption) == (
        "sendPhoto", OWNER, "chart.png", PNG, "The report."
    )  # fmt: skip
    assert photo.content_type == "image/png"
    assert (document.method, document.chat_id, document.filename, document.data, document.caption) == (
        "sendDocument", OWNER, "q3.pdf", report.read_bytes(), None
    )  # fmt: skip
    assert tg.calls("sendMediaGroup") == []
    assert tg.calls("sendMessage") == []  # the text went as the caption, and NO_REPLY sent nothing after
    assert tg.chat_texts(OWNER) == ["The report.", ""]
    result = tool_result(fake_llm, 1)
    assert (result["status"], result["files"], result["message_id"]) == (
        "ok", ["chart.png", "q3.pdf"], str(document.message_id)
    )  # fmt: skip


async def test_the_agent_makes_a_forum_topic_and_posts_a_native_poll(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    group = tg.forum_chat()
    thread = ToolCallSpec("message", {"action": "thread-create", "thread_name": "Lunch"}, id="t1")
    poll = ToolCallSpec(
        "message", {"action": "poll", "poll_question": "Where?", "poll_options": ["Pizza", " Sushi "]}, id="p1"
    )
    fake_llm.script(Reply.tool_calls(thread), Reply.tool_calls(poll), "Topic and poll are up.")
    async with running(config(tmp_path, fake_llm, tg), tmp_path) as state:
        await tg.group_message("set up a lunch topic and poll", chat_id=group, user_id=OWNER, mention=True, forum=True)
        await eventually(lambda: len(fake_llm.requests) == 3, "the model to read both tools' results")
        await tg.wait_sent(group, 1)
        await finished(state)

    [((chat_id, topic_id), name)] = tg.topics.items()
    assert (chat_id, name) == (group, "Lunch")
    assert tg.calls("createForumTopic") == [{"chat_id": group, "name": "Lunch"}]
    created = tool_result(fake_llm, 1)
    assert (created["status"], created["action"], created["thread_id"]) == ("ok", "thread-create", str(topic_id))

    [sent] = tg.calls("sendPoll")
    assert sent["chat_id"] == group and "message_thread_id" not in sent  # in the chat the run was started from
    assert sent["question"] == "Where?"
    assert [option["text"] for option in sent["options"]] == ["Pizza", "Sushi"]
    [(poll_id, posted)] = [(key[1], stored) for key, stored in tg.messages.items() if "poll" in (stored.media or {})]
    assert posted.chat_id == group and posted.media is not None
    assert posted.media["poll"]["question"] == "Where?"
    assert [option["text"] for option in posted.media["poll"]["options"]] == ["Pizza", "Sushi"]
    result = tool_result(fake_llm, 2)
    assert (result["status"], result["action"], result["message_id"]) == ("ok", "poll", str(poll_id))

    assert tg.sent[group] == ["Topic and poll are up."]  # the answer, in the group itself
    assert [call for call in tg.calls("sendMessage") if call.get("message_thread_id") == topic_id] == []


async def test_a_turn_run_again_after_a_sigkill_takes_its_files_from_the_inbox_and_refuses_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(Reply.held("lost with the process"), "The big one did not come through.")
    settings = config(tmp_path, fake_llm, tg, limits={"max_bytes": 1000})
    process = await launch_bot(settings, tmp_path, STARTED)
    try:
        _, small = await tg.media_group([
            ("document", b"x" * 5000, "here", {"name": "big.bin"}),
            ("document", b"small", "", {"name": "small.txt", "mime_type": "text/plain"}),
        ])  # fmt: skip
        [notice] = await wait_said(tg, OWNER, 1)
        await eventually(lambda: fake_llm.holding == 1, "the turn to reach the model, its files fetched")
        # Killed once the notice is recorded as sent: one Telegram took in the instant before the kill, not yet
        # recorded, would be sent again (at least once), which is not what this test is about.
        await eventually(lambda: not read_state(tmp_path / "state", PENDING), "the notice to be recorded as sent")
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()

    async with running(settings, tmp_path) as state:
        await tg.wait_texts(OWNER, lambda texts: "The big one did not come through." in texts)
        await finished(state)
        day = inbox_of(state)

    assert tg.chat_texts(OWNER) == [notice, "The big one did not come through."]  # the notice once
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {f"{day.removeprefix('inbox/')}/small.txt": b"small"}
    assert f'[file "small.txt" (5 bytes), saved as {day}/small.txt]' in user_text(fake_llm)  # the run after the kill
    assert tg.calls("getFile") == [{"file_id": small["message"]["document"]["file_id"]}]  # fetched once
    assert tg.downloads == [served_path(tg, small, "document")]


PENDING = "SELECT id FROM outbox WHERE status = 'pending'"
