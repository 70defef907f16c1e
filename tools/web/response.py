"""Reading a fetched response: its body up to a cap (compression bombs too), what kind of text it is, its charset."""

from __future__ import annotations

import codecs
import re
import zlib
from typing import Any

import httpx

from tools.web.guard import FetchError

# --- reading a response -----------------------------------------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_TEXT_TYPES = {"application/json", "application/xml", "application/javascript", "application/x-javascript"}


def _kind(content_type: str, body: bytes) -> str | None:
    """ "html", "text", or None (not a text page) for a response of this type and (first) bytes."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if mime in ("", "application/octet-stream", "binary/octet-stream", "unknown/unknown"):
        head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
        if head.startswith(b"<!doctype html") or b"<html" in head:
            return "html"
        if b"\x00" not in head:
            try:
                head.decode("utf-8")
            except UnicodeDecodeError as error:
                if error.start < len(head) - 4:  # not just a character cut at the end of the sample
                    return None
            return "text"
    return None


def _decode(body: bytes, charset: str | None, html: bool) -> str:
    if body.startswith(codecs.BOM_UTF8):
        return body[3:].decode("utf-8", errors="replace")
    candidates = [charset]
    if html:
        match = _META_CHARSET.search(body[:4096])
        candidates.append(match.group(1).decode("ascii") if match else None)
    for candidate in candidates:
        if candidate:
            try:
                return body.decode(codecs.lookup(candidate).name, errors="replace")
            except LookupError:
                continue
    return body.decode("utf-8", errors="replace")


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """The (decompressed) body up to `cap` bytes, and whether there was more. Reading stops at the cap, and
    decompression is bounded too, so neither a huge page nor a compression bomb is read whole."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    decompressor: Any = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        decompressor = zlib.decompressobj(zlib.MAX_WBITS | 32)  # zlib or gzip header, detected
    elif encoding not in ("", "identity"):
        raise FetchError(f"the server sent an unsupported content-encoding {encoding!r}")
    body = bytearray()
    async for chunk in response.aiter_raw():
        room = cap - len(body)
        if decompressor is None:
            data = chunk
        else:
            try:
                data = decompressor.decompress(chunk, room + 1)
            except zlib.error as error:
                raise FetchError(f"the server sent a body that does not decompress ({encoding}): {error}") from error
        if len(data) > room:
            body += data[:room]
            return bytes(body), True
        body += data
    return bytes(body), False
