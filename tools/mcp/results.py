"""An MCP server's answer as a tool result: text, images a model that can see is shown, embedded resources with
their URI, `isError` as an error the model reads; all of it capped and wrapped as untrusted content naming the
server."""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING

from tools.base import IMAGE_TYPES, MAX_IMAGE_BYTES, ImageBlock, ToolResult, error_result, json_result
from tools.untrusted import wrap_untrusted

if TYPE_CHECKING:
    from mcp.types import CallToolResult

__all__ = ["MAX_IMAGES", "MAX_TEXT_CHARS", "tool_result"]

_SHOWABLE = frozenset(IMAGE_TYPES.values())
# The most text one answer gives the model: as much as `web_fetch` returns at most (a server's 3 MB would otherwise
# go whole into the request, and stay in the session's history).
MAX_TEXT_CHARS = 100_000
MAX_IMAGES = 4  # shown from one answer (each at most MAX_IMAGE_BYTES)


def _image(data: str, mime_type: str) -> ImageBlock | str:
    """An image block, or why the image cannot be shown."""
    if mime_type not in _SHOWABLE:
        return f"an image of type {mime_type} (not a type models are shown)"
    try:
        size = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return "an image whose data is not valid base64"
    if size > MAX_IMAGE_BYTES:
        return f"an image of {size} bytes, larger than the {MAX_IMAGE_BYTES} a model is shown"
    return ImageBlock(data=data, mime_type=mime_type)


def _parts(result: CallToolResult) -> tuple[list[str], list[ImageBlock]]:
    """The text of every content block (each image, audio clip and binary resource named in it), and the images."""
    from mcp.types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent, TextResourceContents

    texts: list[str] = []
    images: list[ImageBlock] = []

    def picture(data: str, mime_type: str, where: str) -> None:
        if len(images) >= MAX_IMAGES:
            texts.append(f"[an image{where}: not shown, more than {MAX_IMAGES} in one answer]")
            return
        image = _image(data, mime_type)
        if isinstance(image, ImageBlock):
            images.append(image)
            texts.append(f"[image {len(images)}{where}: {mime_type}, shown after this text]")
        else:
            texts.append(f"[{image}{where}: not shown]")

    for block in result.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ImageContent):
            picture(block.data, block.mime_type, "")
        elif isinstance(block, AudioContent):
            texts.append(f"[audio of type {block.mime_type}: not played]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                texts.append(f"[resource {resource.uri}]\n{resource.text}")
            elif (resource.mime_type or "") in _SHOWABLE:
                picture(resource.blob, resource.mime_type or "", f" (resource {resource.uri})")
            else:
                texts.append(f"[resource {resource.uri}: binary data of type {resource.mime_type or 'unknown'}]")
        elif isinstance(block, ResourceLink):
            about = f": {block.description}" if block.description else ""
            texts.append(f"[resource link {block.uri} ({block.name}){about}]")
    if not result.content and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return texts, images


def _capped(text: str) -> tuple[str, str | None]:
    """The text cut to MAX_TEXT_CHARS, and the note that says so (None when it was whole)."""
    if len(text) <= MAX_TEXT_CHARS:
        return text, None
    return text[:MAX_TEXT_CHARS], (
        f"the server's answer was cut at {MAX_TEXT_CHARS:,} of its {len(text):,} characters; ask it for less"
    )


def tool_result(name: str, server: str, tool: str, result: CallToolResult) -> ToolResult:
    """`result` of the call of `tool` on `server` (known here as `name`) as what the model reads: the text fenced as
    untrusted content naming the server, and cut (saying so) where it is longer than MAX_TEXT_CHARS."""
    texts, images = _parts(result)
    text, note = _capped("\n\n".join(texts) or "(no content)")
    content = wrap_untrusted(text, f"MCP server {server}, tool {tool}")
    if result.is_error:
        answer = error_result(name, content if note is None else f"{content}\n({note})")
    else:
        payload = {"status": "ok", "server": server, "tool": tool, "content": content}
        answer = json_result(payload if note is None else payload | {"truncated": True, "note": note})
    answer.content += images
    return answer
