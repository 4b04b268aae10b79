"""What a file's bytes are, whatever its name says: its type from its first bytes, its text's encoding.

The suffix picks the reader (:func:`jobs.extract.extract_document`), and names lie. A PNG saved as
``.pdf`` opens in MuPDF as a one-page picture and used to fail as "holds no text"; an HTML login page
saved under a book's name opens in MuPDF as HTML and would be ingested as the book. Only a positive
identification overrides the name: bytes that match no signature go to the reader the suffix picks,
which reports its own errors.

Text formats are decoded here too, once for every reader: UTF-8 (or the encoding a BOM names), then
Windows-1252, the usual legacy encoding of Western rulebooks, when charset-normalizer finds it as
plausible as its own best guess (on short Western text its best guess is often a neighbouring code
page: "Règles" read as cp1250 is "Rčgles"), then that best guess (Cyrillic, Greek, Shift-JIS…).
Bytes that are text in no encoding fail; nothing is ever decoded with replacement characters.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass

from jobs.errors import CorruptDocument

__all__ = ["HEAD_BYTES", "DecodedText", "Signature", "decode_text", "read_head", "sniff"]

HEAD_BYTES = 4096
"""How much of a file :func:`sniff` looks at."""


@dataclass(frozen=True, slots=True)
class Signature:
    """What a file's first bytes show it to be.

    Attributes:
        kind: the reader it needs (``"pdf"``, ``"image"``, ``"docx"``, ``"epub"``, ``"html"``), or the
            family of a type the pipeline does not read (``"zip"``, ``"archive"``, ``"binary"``).
        what: the type in words, for messages ("a PNG image").
        filetype: MuPDF's name for an image type ("png", "jpeg"…), else empty.
    """

    kind: str
    what: str
    filetype: str = ""


_PDF = Signature("pdf", "a PDF document")
_HTML = Signature("html", "an HTML page")
_ZIP = Signature("zip", "a ZIP archive")
_EPUB = Signature("epub", "an EPUB book")
_DOCX = Signature("docx", "a Word (DOCX) document")
# (prefix, signature): checked in order against the start of the file.
_MAGIC: tuple[tuple[bytes, Signature], ...] = (
    (b"\x89PNG\r\n\x1a\n", Signature("image", "a PNG image", "png")),
    (b"\xff\xd8\xff", Signature("image", "a JPEG image", "jpeg")),
    (b"GIF87a", Signature("image", "a GIF image", "gif")),
    (b"GIF89a", Signature("image", "a GIF image", "gif")),
    (b"II*\x00", Signature("image", "a TIFF image", "tiff")),
    (b"MM\x00*", Signature("image", "a TIFF image", "tiff")),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", Signature("image", "a JPEG 2000 image", "jpx")),
    (b"\x1f\x8b", Signature("archive", "a gzip archive")),
    (b"7z\xbc\xaf\x27\x1c", Signature("archive", "a 7-Zip archive")),
    (b"Rar!\x1a\x07", Signature("archive", "a RAR archive")),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", Signature("binary", "an old Microsoft Office file (.doc, .xls, .ppt)")),
    (b"\x7fELF", Signature("binary", "a program (ELF executable)")),
)
# BMP's two-byte magic is too weak alone: its header size field must hold one of the known sizes too.
_BMP_HEADER_SIZES = {12, 40, 52, 56, 64, 108, 124}


def sniff(head: bytes) -> Signature | None:
    """The type a file's first bytes show (:data:`HEAD_BYTES` of them are plenty), or None."""
    for magic, signature in _MAGIC:
        if head.startswith(magic):
            return signature
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return Signature("image", "a WebP image", "webp")
    if head.startswith(b"BM") and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES:
        return Signature("image", "a BMP image", "bmp")
    # PDF readers accept junk before the header within the first KiB.
    if b"%PDF-" in head[:1024]:
        return _PDF
    if head.startswith(b"PK\x03\x04"):
        # An EPUB's first entry is its uncompressed "mimetype"; a DOCX names word/ early on.
        if head[30:58] == b"mimetypeapplication/epub+zip":
            return _EPUB
        return _DOCX if b"word/" in head else _ZIP
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:15].lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return _HTML
    return None


def read_head(source: bytes | str | os.PathLike[str]) -> bytes:
    """The first :data:`HEAD_BYTES` of bytes or of the file at a path (a large PDF is not read whole)."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source[:HEAD_BYTES])
    with open(source, "rb") as file:
        return file.read(HEAD_BYTES)


@dataclass(frozen=True, slots=True)
class DecodedText:
    """A text file's content and the encoding it was read in.

    Attributes:
        text: the text, without a BOM.
        encoding: Python's name for the encoding.
        warning: what a user should hear about the encoding (a legacy one was guessed), else None.
    """

    text: str
    encoding: str
    warning: str | None = None


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# charset-normalizer's "chaos" of two guesses this close is a tie, which Windows-1252 wins.
_CHAOS_TIE = 0.01
# A UTF-8 file with more bytes than this that are not UTF-8 is not "UTF-8 with a stray byte".
_MAX_STRAY_BYTES = 64


def _utf8_with_stray_bytes(data: bytes) -> DecodedText | None:
    """UTF-8 with a few bytes that are not (a Windows-1252 quote pasted into a UTF-8 file), those read
    as Windows-1252; None unless the file's valid UTF-8 beyond ASCII outnumbers its stray bytes.

    A whole-file guess fails on such a file (no single encoding fits it), and Windows-1252 for all of
    it would garble every UTF-8 letter ("café" as "cafÃ©"). A Latin-1 file has no valid multi-byte
    UTF-8 in practice, so it goes on to :func:`decode_text`'s guess.
    """
    view = memoryview(data)
    parts: list[str] = []
    stray = 0
    pos = 0
    while pos < len(data):
        try:
            # The decoder stops at the first bad byte, so the whole loop reads each byte once.
            parts.append(codecs.utf_8_decode(view[pos:], "strict", True)[0])
            break
        except UnicodeDecodeError as error:
            bad = data[pos + error.start : pos + error.end]
            stray += len(bad)
            if stray > _MAX_STRAY_BYTES:
                return None
            try:
                parts += [codecs.utf_8_decode(view[pos : pos + error.start], "strict", True)[0], bad.decode("cp1252")]
            except UnicodeDecodeError:
                return None  # a byte Windows-1252 leaves undefined: binary, not text
            pos += error.end
    text = "".join(parts)
    multibyte = sum(1 for ch in text if ord(ch) > 0x7F) - stray
    if multibyte <= stray:
        return None
    return DecodedText(text, "utf-8", f"the file is UTF-8 but for {stray} stray byte(s), read as Windows-1252")


def decode_text(data: bytes, filename: str) -> DecodedText:
    """Decode a text file (Markdown, HTML, plain text) in the encoding its bytes are in.

    Raises:
        CorruptDocument: the bytes are not text in UTF-8 or any encoding charset-normalizer recognises
            (a binary file under a text name), or a BOM names an encoding the rest does not follow.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return DecodedText(data.decode(encoding), encoding)
            except UnicodeDecodeError as exc:
                detail = f"it starts with a {encoding} byte order mark but is not {encoding} ({exc.reason})"
                raise CorruptDocument(filename, detail) from exc
    try:
        return DecodedText(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    mixed = _utf8_with_stray_bytes(data)
    if mixed is not None:
        return mixed
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    western = from_bytes(data, cp_isolation=["cp1252"]).best()
    if western is not None and (best is None or western.chaos <= best.chaos + _CHAOS_TIE):
        best = western
    if best is None:
        raise CorruptDocument(
            filename, "its bytes are not text in UTF-8 or any other encoding recognised; binary data?"
        )
    return DecodedText(
        str(best), best.encoding, f"the file is not UTF-8: read as {best.encoding}, the encoding its bytes fit best"
    )
