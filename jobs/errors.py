"""Errors of the ingestion job's extract stage.

Each one names the file it is about and says what is wrong in words a user can act on. They are
:class:`~schemas.errors.LorekeeperError` subclasses, so they pickle across Ray workers (the base
rebuilds them from ``message`` and ``context``) and carry the HTTP status an API answers with:
422 when the input itself is at fault, 413 when it is too big, 500 when the server lacks a piece.
"""

from __future__ import annotations

from schemas.errors import LorekeeperError

__all__ = [
    "CorruptDocument",
    "EmptyDocument",
    "EncryptedDocument",
    "ExtractionError",
    "FileTooLarge",
    "MissingDependency",
    "UnsupportedFormat",
]


class ExtractionError(LorekeeperError):
    """A file could not be turned into text."""

    status_code = 422
    code = "extraction_failed"

    def __init__(self, filename: str, problem: str, **context: object) -> None:
        super().__init__(f"{filename}: {problem}", filename=filename, problem=problem, **context)
        self.filename = filename
        self.problem = problem


class EncryptedDocument(ExtractionError):
    """The document is password-protected and no (or a wrong) password was given."""

    code = "encrypted_document"

    def __init__(self, filename: str, *, password_given: bool = False) -> None:
        problem = (
            "the password given does not open this encrypted document"
            if password_given
            else "the document is encrypted; give its password to ingest it"
        )
        super().__init__(filename, problem, password_given=password_given)
        self.password_given = password_given


class CorruptDocument(ExtractionError):
    """The bytes are not a readable document of the type its name claims."""

    code = "corrupt_document"

    def __init__(self, filename: str, detail: str) -> None:
        super().__init__(filename, f"the file is damaged or not a valid document ({detail})", detail=detail)
        self.detail = detail


class EmptyDocument(ExtractionError):
    """The document holds no text that could be read (an empty file, blank pages, unread scans)."""

    code = "empty_document"

    def __init__(self, filename: str, detail: str, *, ocr_pages_skipped: int = 0) -> None:
        super().__init__(
            filename, f"no text could be extracted: {detail}", detail=detail, ocr_pages_skipped=ocr_pages_skipped
        )
        self.detail = detail
        self.ocr_pages_skipped = ocr_pages_skipped


class UnsupportedFormat(ExtractionError):
    """The file's type is not one the pipeline reads."""

    code = "unsupported_format"

    def __init__(self, filename: str, detail: str) -> None:
        super().__init__(filename, detail, detail=detail)
        self.detail = detail


class FileTooLarge(ExtractionError):
    """The file is larger than the configured limit."""

    status_code = 413
    code = "file_too_large"

    def __init__(self, filename: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            filename,
            f"the file is {size_bytes:,} bytes, over the limit of {limit_bytes:,} bytes",
            size_bytes=size_bytes,
            limit_bytes=limit_bytes,
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class MissingDependency(ExtractionError):
    """Reading this file needs an optional package (or program) that is not installed here."""

    status_code = 500
    code = "missing_dependency"

    def __init__(self, filename: str, package: str, install_hint: str) -> None:
        super().__init__(
            filename,
            f"reading this file needs {package}, which is not installed; {install_hint}",
            package=package,
            install_hint=install_hint,
        )
        self.package = package
        self.install_hint = install_hint
