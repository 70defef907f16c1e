"""Images in a conversation as the model is shown them: the recent ones read back from the files they came from,
older ones (and every one, for a model that cannot see) left to the text that names them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.compaction import is_turn_start
from agent.messages import ContentBlock, ImageBlock, Message, TextBlock, ToolResultMessage, UserMessage
from tools.base import image_file

__all__ = ["DEFAULT_IMAGE_TURNS", "has_images", "load_recent_images", "without_images"]

DEFAULT_IMAGE_TURNS = 4  # the images of this many latest user turns are shown again; older ones are named only


def load_recent_images(history: Sequence[Message], turns: int = DEFAULT_IMAGE_TURNS) -> list[Message]:
    """`history` with the images of its latest `turns` user turns read back from their files (a transcript keeps
    an image by its path), the older ones left to the text that names them. Reads files: call it off the loop."""
    if not any(map(has_images, history)):  # the usual case, asked of a whole session's history on each run
        return list(history)
    recent_from = _turn_start(history, turns)
    return [
        _with_images(message, load=index >= recent_from) if has_images(message) else message
        for index, message in enumerate(history)
    ]


def _turn_start(history: Sequence[Message], turns: int) -> int:
    """Where the latest `turns` user turns of `history` begin (0 when it has fewer; its end for none), found
    from the end: the older part is never read."""
    if turns <= 0:
        return len(history)
    found = 0
    for index in range(len(history) - 1, -1, -1):
        if is_turn_start(history[index]):
            found += 1
            if found == turns:
                return index
    return 0


def without_images(messages: Sequence[Message]) -> list[Message]:
    """The conversation for a model that cannot see: each image left to the text that names it."""
    return [_with_images(message, load=False) if has_images(message) else message for message in messages]


def has_images(message: Message) -> bool:
    """Whether `message` shows images (a user message or tool result with an image block)."""
    # Asked of every message of the history on each model call: exact type checks, the cheapest Python has (the
    # message types are final), and nothing built for the messages that have no content blocks.
    if type(message) is not UserMessage and type(message) is not ToolResultMessage:
        return False
    return any(type(block) is ImageBlock for block in message.content)


def _with_images(message: Message, *, load: bool) -> Message:
    assert isinstance(message, UserMessage | ToolResultMessage)
    content: list[ContentBlock] = []
    for block in message.content:
        shown = _shown(block, load) if isinstance(block, ImageBlock) else block
        if shown is not None:
            content.append(shown)
        elif isinstance(message, ToolResultMessage):  # a person's message names its files in its text already
            assert isinstance(block, ImageBlock)
            content.append(TextBlock(text=f"[image {block.path or 'returned by the tool'}: not shown]"))
    if not content:
        content = [TextBlock(text="[image: not shown]")]  # no provider takes an empty message
    return message.model_copy(update={"content": content})


def _shown(block: ImageBlock, load: bool) -> ImageBlock | None:
    """The image as the model is shown it (read back from its file if need be), or None when it is not shown."""
    if not load:
        return None
    if block.data or block.path is None:
        return block
    return image_file(Path(block.path), block.mime_type)
