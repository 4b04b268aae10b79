"""Helpers for the concept tests: Fate SRD text cut into pseudo-chunks, and a tiny OpenAI-compatible server.

The corpus is read in place from ``../shared/corpus`` (never copied into the project). The server is a
stdlib ``ThreadingHTTPServer`` on 127.0.0.1 that answers ``POST /v1/chat/completions`` with canned
answers chosen by a marker in each chunk's text, so the LLM extractor is exercised over real HTTP.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jobs.document import TextChunk

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
FATE_DIR = CORPUS / "rulebooks" / "fate-srd"
FATE_CONDENSED = FATE_DIR / "Fate-Condensed-SRD-CC-BY.md"

_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BOLD_RE = re.compile(r"\*\*(.+?)\*\*")
_TAG_RE = re.compile(r"<[^<>\n]*>")
_LINK_RE = re.compile(r"\[([^\]\n]*)\]\([^)\s]*\)")


def _plain(markdown: str) -> str:
    """Markdown to the plain text an extractor would emit: no tags, links, emphasis markers."""
    text = _TAG_RE.sub("", markdown)
    text = _LINK_RE.sub(r"\1", text)
    return text.replace("**", "").replace("__", "")


def markdown_chunks(path: Path, *, max_chars: int = 1800) -> tuple[list[TextChunk], list[list[str]]]:
    """Cut a Markdown book into heading-aware pseudo-chunks, with the bold terms of each.

    A section (text under one heading) is packed paragraph by paragraph into chunks of about
    ``max_chars``; every chunk keeps the heading path down to its section.

    Returns:
        The chunks, and per chunk the terms set in bold inside it.
    """
    stack: list[tuple[int, str]] = []
    sections: list[tuple[list[str], list[str]]] = []  # (heading path, paragraphs)
    paragraphs: list[str] = []
    current: list[str] = []

    def close_paragraph() -> None:
        if current:
            paragraphs.append("\n".join(current))
            current.clear()

    def close_section() -> None:
        close_paragraph()
        if paragraphs:
            sections.append(([_plain(h).strip() for _, h in stack], list(paragraphs)))
            paragraphs.clear()

    for line in path.read_text(encoding="utf-8").splitlines():
        match = _HEADING_RE.match(line)
        if match:
            close_section()
            level = len(match.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, match.group(2)))
        elif line.strip():
            current.append(line)
        else:
            close_paragraph()
    close_section()

    chunks: list[TextChunk] = []
    bold: list[list[str]] = []
    for path_, paras in sections:
        packed: list[str] = []
        for para in paras:
            if packed and sum(len(p) for p in packed) + len(para) > max_chars:
                chunks.append(_chunk(len(chunks), path_, packed))
                bold.append(_bold_terms(packed))
                packed = []
            packed.append(para)
        if packed:
            chunks.append(_chunk(len(chunks), path_, packed))
            bold.append(_bold_terms(packed))
    return chunks, bold


def _chunk(sequence: int, heading_path: list[str], paragraphs: list[str]) -> TextChunk:
    text = _plain("\n\n".join(paragraphs))
    return TextChunk(
        sequence=sequence,
        text=text,
        heading_path=list(heading_path),
        page_start=None,
        page_end=None,
        token_count=max(1, len(text.split())),
        kinds=["paragraph"],
    )


def _bold_terms(paragraphs: list[str]) -> list[str]:
    return sorted({_plain(m).strip() for p in paragraphs for m in _BOLD_RE.findall(p)})


def window_chunks(text: str, *, size: int = 2000, start_sequence: int = 0) -> list[TextChunk]:
    """Cut plain text into fixed windows at whitespace (for throughput runs over unstructured text)."""
    chunks: list[TextChunk] = []
    pos = 0
    while pos < len(text):
        end = min(len(text), pos + size)
        if end < len(text):
            space = text.rfind(" ", pos, end)
            end = space if space > pos else end
        piece = text[pos:end]
        chunks.append(
            TextChunk(
                sequence=start_sequence + len(chunks),
                text=piece,
                heading_path=[],
                page_start=None,
                page_end=None,
                token_count=max(1, len(piece.split())),
            )
        )
        pos = end
    return chunks


# ---------------------------------------------------------------------------------------------------
# A canned OpenAI-compatible chat completions server
# ---------------------------------------------------------------------------------------------------

CANNED_CONCEPTS: dict[str, list[dict[str, Any]]] = {
    "aspects": [
        {"name": "Aspects", "kind": "mechanic", "aliases": ["aspect"], "salience": 0.95},
        {"name": "Fate Point", "kind": "mechanic", "aliases": ["FP", "fate points"], "salience": 0.7},
        {"name": "High Concept", "kind": "term", "aliases": [], "salience": 0.4},
    ],
    "stress": [
        {"name": "Stress", "kind": "mechanic", "aliases": ["stress boxes"], "salience": 0.9},
        {"name": "Consequence", "kind": "mechanic", "aliases": ["consequences"], "salience": 0.8},
        {"name": "the", "kind": "term", "aliases": [], "salience": 0.1},  # junk the extractor must drop
    ],
    "skills": [
        {"name": "Skill", "kind": "mechanic", "aliases": ["skills"], "salience": 0.9},
        {"name": "Stunt", "kind": "spell", "aliases": [], "salience": 1.7},  # odd kind, salience > 1
    ],
}


@dataclass
class ServerLog:
    """What the canned server saw."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    markers: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _marker(text: str) -> str:
    match = re.search(r"\[\[case:([a-z0-9-]+)\]\]", text)
    return match.group(1) if match else "aspects"


def _answer_for(chunks: list[dict[str, Any]], seen: Counter[str]) -> tuple[int, str]:
    """Status and body text of the completion for one request's chunks."""
    markers = [_marker(c["text"]) for c in chunks]
    if "error500" in markers:
        return 500, json.dumps({"error": {"message": "model worker crashed", "type": "server_error"}})
    if "flaky" in markers and seen["flaky"] == 1:  # the first attempt fails, the retry succeeds
        return 503, json.dumps({"error": {"message": "warming up", "type": "server_error"}})
    if "malformed" in markers:
        return 200, '{"chunks": [{"id": 1, "concepts": [{"name": "Aspect", "kind": '  # cut off mid-answer
    entries = []
    for chunk, marker in zip(chunks, markers, strict=True):
        if marker == "missing":
            continue  # the model forgot this chunk
        if marker == "bad-entry":
            entries.append({"id": chunk["id"], "concepts": [{"name": "Zone", "kind": "term", "salience": "high"}]})
            continue
        key = marker if marker in CANNED_CONCEPTS else "aspects"
        entries.append({"id": chunk["id"], "concepts": CANNED_CONCEPTS[key]})
    return 200, json.dumps({"chunks": entries})


def _completion(content: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Handler(BaseHTTPRequestHandler):
    server: _CannedServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass  # keep pytest output clean

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        log = self.server.log
        chunks = json.loads(body["messages"][-1]["content"])["chunks"]
        with log.lock:
            log.requests.append(body)
            log.headers.append({k.lower(): v for k, v in self.headers.items()})
            for chunk in chunks:
                log.markers[_marker(chunk["text"])] += 1
            seen = Counter(log.markers)
            log.in_flight += 1
            log.peak_in_flight = max(log.peak_in_flight, log.in_flight)
        try:
            if self.path != "/v1/chat/completions":
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            if any(_marker(c["text"]) == "slow" for c in chunks):
                time.sleep(self.server.slow_s)
            time.sleep(0.05)  # long enough for concurrent requests to overlap
            status, content = _answer_for(chunks, seen)
            if status == 200:
                self._send(200, json.dumps(_completion(content, body["model"])))
            else:
                self._send(status, content)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)
        finally:
            with log.lock:
                log.in_flight -= 1

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _CannedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, slow_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)  # port 0: the OS picks a free port, no race
        self.log = ServerLog()
        self.slow_s = slow_s


@contextmanager
def canned_openai_server(*, slow_s: float = 1.5) -> Iterator[tuple[str, ServerLog]]:
    """Run the canned server in a thread; yields its base URL (``http://127.0.0.1:PORT/v1``) and log.

    Markers in a chunk's text pick the answer: ``[[case:aspects|stress|skills]]`` (valid canned
    concepts), ``[[case:malformed]]`` (truncated JSON), ``[[case:error500]]`` (HTTP 500 every time),
    ``[[case:flaky]]`` (503 once, then valid), ``[[case:missing]]`` (left out of the answer),
    ``[[case:bad-entry]]`` (an entry that fails validation), ``[[case:slow]]`` (sleeps ``slow_s``).
    """
    server = _CannedServer(slow_s)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
