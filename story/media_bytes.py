"""What an uploaded media file's bytes say about it: that they are what their MIME type claims (for the
formats read here), and an image's size or a WAV's length when the uploader did not give them.

Only headers are read (PNG, GIF, JPEG, SVG's root element, WAV); other formats of a kind are taken as the
uploader declares them, with the size or length they give.
"""

from __future__ import annotations

import io
import re
import struct
import wave
from dataclasses import dataclass

from story.errors import StoryInvalid

__all__ = ["Described", "describe"]


@dataclass(frozen=True)
class Described:
    width: int | None = None
    height: int | None = None
    duration_seconds: float | None = None


_PNG = b"\x89PNG\r\n\x1a\n"
_SVG_SIZE = re.compile(rb'<svg[^>]*?\swidth="(\d+)(?:px)?"[^>]*?\sheight="(\d+)(?:px)?"', re.S)


def describe(data: bytes, mime: str) -> Described:
    """The size or length read from ``data`` (None where the format is not read here).

    Raises:
        StoryInvalid: the bytes are not the format ``mime`` names.
    """
    kind = mime.split(";", 1)[0].strip().lower()
    if kind == "image/png":
        _expect(data.startswith(_PNG) and data[12:16] == b"IHDR", kind)
        width, height = struct.unpack(">II", data[16:24])
        return Described(width or None, height or None)
    if kind == "image/gif":
        _expect(data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10, kind)
        width, height = struct.unpack("<HH", data[6:10])
        return Described(width or None, height or None)
    if kind == "image/jpeg":
        _expect(data.startswith(b"\xff\xd8\xff"), kind)
        return _jpeg(data)
    if kind == "image/svg+xml":
        _expect(b"<svg" in data[:4096], kind)
        match = _SVG_SIZE.search(data[:4096])
        return Described(int(match.group(1)) or None, int(match.group(2)) or None) if match else Described()
    if kind in ("audio/wav", "audio/x-wav", "audio/wave"):
        _expect(data[:4] == b"RIFF" and data[8:12] == b"WAVE", kind)
        try:
            with wave.open(io.BytesIO(data)) as w:
                return Described(duration_seconds=round(w.getnframes() / w.getframerate(), 3))
        except (wave.Error, EOFError, ZeroDivisionError):
            raise StoryInvalid(f"the upload is not a readable {kind} file") from None
    return Described()


def _expect(ok: bool, kind: str) -> None:
    if not ok:
        raise StoryInvalid(f"the upload's bytes are not a {kind} file (its MIME type says they are)")


def _jpeg(data: bytes) -> Described:
    """The size in a JPEG's first start-of-frame marker."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return Described(width or None, height or None)
        i += 2 + length
    return Described()
