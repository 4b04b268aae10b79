"""OCR through tesseract, as built into MuPDF: finding its language data, and reading image files.

MuPDF links tesseract's library itself, so "tesseract is installed" here means that tesseract's
trained language data (``eng.traineddata``) can be found: Debian's ``tesseract-ocr`` and
``tesseract-ocr-eng`` packages put it in ``/usr/share/tesseract-ocr/5/tessdata``; ``TESSDATA_PREFIX``
overrides the search. The search runs once per process and language.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.errors import CorruptDocument, EmptyDocument, MissingDependency, UnsupportedFormat

if TYPE_CHECKING:
    from jobs.document import ExtractedDocument
    from jobs.extract.pdf import ImageSink

__all__ = [
    "OCR_INSTALL_HINT",
    "OcrConfig",
    "detect_ocr",
    "extract_image",
    "find_tessdata",
    "resolve_ocr",
]

_log = logging.getLogger(__name__)

OCR_INSTALL_HINT = (
    "install tesseract's language data (Debian: apt-get install tesseract-ocr tesseract-ocr-eng) "
    "or point TESSDATA_PREFIX at a folder holding <language>.traineddata"
)

# Where distributions put tesseract's data, newest first; TESSDATA_PREFIX is tried before these.
_TESSDATA_GLOBS = (
    "/usr/share/tesseract-ocr/*/tessdata",
    "/usr/share/tesseract-ocr/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)


@dataclass(frozen=True, slots=True)
class OcrConfig:
    """How to OCR a page.

    Attributes:
        tessdata: folder holding ``<language>.traineddata``.
        language: tesseract language code(s), e.g. ``"eng"`` or ``"eng+deu"``.
        dpi: resolution the page is rendered at before recognition; 300 is tesseract's sweet spot.
    """

    tessdata: str
    language: str = "eng"
    dpi: int = 300


def _has_language(folder: Path, language: str) -> bool:
    return all((folder / f"{lang}.traineddata").is_file() for lang in language.split("+"))


@functools.lru_cache(maxsize=8)
def find_tessdata(language: str = "eng") -> str | None:
    """Return the folder with tesseract's data for ``language``, or None when there is none."""
    candidates: list[str] = []
    prefix = os.environ.get("TESSDATA_PREFIX")
    if prefix:
        candidates += [prefix, os.path.join(prefix, "tessdata")]
    for pattern in _TESSDATA_GLOBS:
        candidates += sorted(glob.glob(pattern), reverse=True)
    for candidate in candidates:
        folder = Path(candidate)
        if _has_language(folder, language):
            return str(folder)
    return None


def detect_ocr(language: str = "eng", dpi: int = 300) -> OcrConfig | None:
    """Return an OCR configuration when tesseract's data for ``language`` is installed, else None."""
    tessdata = find_tessdata(language)
    return OcrConfig(tessdata=tessdata, language=language, dpi=dpi) if tessdata else None


def resolve_ocr(ocr: bool | OcrConfig | None, filename: str) -> tuple[OcrConfig | None, str]:
    """Turn the caller's ``ocr`` argument into a configuration, or None and the reason why not.

    Args:
        ocr: ``None`` to use OCR when it is installed, ``False`` to never OCR, ``True`` to require
            it, or a ready configuration.
        filename: the file being read, for the error message.

    Raises:
        MissingDependency: ``ocr=True`` and no tesseract data is installed.
    """
    if isinstance(ocr, OcrConfig):
        return ocr, ""
    if ocr is False:
        return None, "OCR is turned off"
    config = detect_ocr()
    if config is None:
        if ocr is True:
            raise MissingDependency(filename, "tesseract language data (eng)", OCR_INSTALL_HINT)
        return None, f"tesseract is not installed ({OCR_INSTALL_HINT})"
    return config, ""


def extract_image(
    data: bytes,
    filename: str,
    *,
    ocr: bool | OcrConfig | None = None,
    image_sink: ImageSink | None = None,
    filetype: str | None = None,
    mismatch: str | None = None,
) -> ExtractedDocument:
    """Read the text of an image file (PNG, JPEG, TIFF, …) by OCR.

    The image is wrapped in a PDF (one page per frame) and read by the PDF extractor, so OCR'd
    text gets the same reading order and block structure as a scanned PDF.

    Args:
        data: the image's bytes.
        filename: the file's name, for messages; its suffix names the image type unless ``filetype`` does.
        ocr: as :func:`resolve_ocr`.
        image_sink: saves images (see :func:`jobs.extract.pdf.extract_pdf`).
        filetype: MuPDF's name for the image type, when the bytes showed it (see :mod:`jobs.extract.sniff`).
        mismatch: what the file really is when its name said otherwise ("the file is a PNG image,
            not a PDF"), so that a failure starts with it.

    Raises:
        EmptyDocument: no OCR is available (the message says how to install it), or the image
            holds no recognisable text.
        CorruptDocument / UnsupportedFormat: the bytes are not an image MuPDF can decode.
    """
    import pymupdf

    from jobs.extract.pdf import extract_pdf

    config, reason = resolve_ocr(ocr, filename)
    filetype = filetype or Path(filename).suffix.lower().lstrip(".") or "png"
    try:
        with pymupdf.open(stream=data, filetype=filetype) as image_doc:
            if image_doc.page_count == 0:
                raise CorruptDocument(filename, "the image has no frames")
            pdf_bytes = image_doc.convert_to_pdf()
    except (CorruptDocument, EmptyDocument):
        raise
    except Exception as exc:
        message = str(exc)
        if "unknown" in message.lower() or "unsupported" in message.lower():
            raise UnsupportedFormat(filename, f"MuPDF cannot decode this image type ({message})") from exc
        raise CorruptDocument(filename, message) from exc
    if config is None:
        because = f"{mismatch}; an image" if mismatch else "an image file"
        raise EmptyDocument(filename, f"{because} is read by OCR, and {reason}", ocr_pages_skipped=1)
    return extract_pdf(pdf_bytes, filename, ocr=config, image_sink=image_sink)
