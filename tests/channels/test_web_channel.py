"""The WebChat account (channels.web) as the gateway and the web server use it: a person's message journaled with its
files, what the bot sends, edits and deletes shown to the page watching, a click only on a button the message has,
and a download only from the chat it was sent to."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.base import ActionEvent, Button, ChatTarget, InboundMessage, OutboundFile, OutboundMessage
from channels.web import Upload, WebChannel
from routing import Peer
from routing.errors import ChannelError


def target(login: str) -> ChatTarget:
    return ChatTarget(channel="web", account="main", peer=Peer("direct", login))


async def test_a_chat_is_shown_to_its_page_and_nobody_elses(tmp_path: Path) -> None:
    chat = WebChannel("main", tmp_path / "files")
    received: list[InboundMessage] = []
    clicks: list[ActionEvent] = []

    async def on_message(message: InboundMessage) -> None:
        received.append(message)

    async def on_action(event: ActionEvent) -> str | None:
        clicks.append(event)
        return "noted"

    await chat.start(on_message, on_action)
    page = chat.watch("ann")
    await chat.say("ann", "hi", files=(Upload("a.txt", "text/plain", b"data"),))
    [message] = received
    assert (message.channel, message.account, message.sender_id, message.peer) == (
        "web",
        "main",
        "ann",
        Peer("direct", "ann"),
    )
    assert [chunk async for chunk in chat.download(message.attachments[0])] == [b"data"]
    assert (await page.get()).message.text == "hi"

    document = tmp_path / "report.txt"
    document.write_text("the report")
    card = OutboundMessage(text="Approve?", buttons=[[Button(label="Allow once", value="ap:1:o")]])
    sent = await chat.send(target("ann"), card)
    assert sent is not None and (await page.get()).message.buttons == [[("Allow once", "ap:1:o", "secondary")]]
    with pytest.raises(ChannelError):
        await chat.click("ann", sent, "ap:2:o")  # not a button of that message
    with pytest.raises(ChannelError):
        await chat.click("bob", sent, "ap:1:o")  # not Bob's chat
    assert await chat.click("ann", sent, "ap:1:o") == "noted"
    assert [(click.sender_id, click.value) for click in clicks] == [("ann", "ap:1:o")]

    await chat.edit(target("ann"), sent, OutboundMessage(text="Allowed."))
    assert ((event := await page.get()).kind, event.message.text, event.message.buttons) == ("changed", "Allowed.", [])
    with_file = await chat.send(
        target("ann"), OutboundMessage(text="here", media=[OutboundFile(path=str(document), name="report.txt")])
    )
    [(download, name)] = (await page.get()).message.files
    document.write_text("changed afterwards")
    kept = chat.download_file("ann", download)
    assert kept is not None and kept[0].read_text() == "the report" and kept[1] == name == "report.txt"
    assert chat.download_file("bob", download) is None
    await chat.delete(target("ann"), with_file or "")
    assert (await page.get()).kind == "gone"
    assert [shown.text for shown in chat.shown("ann")] == ["hi", "Allowed."] and chat.shown("bob") == []
    chat.unwatch("ann", page)
    later = chat.watch("ann")  # a page opened now first gets what the chat holds
    assert [(await later.get()).message.text for _ in range(2)] == ["hi", "Allowed."]
    await chat.stop()
    with pytest.raises(ChannelError):
        await chat.say("ann", "after the stop")
