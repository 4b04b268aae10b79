"""Reading transcripts: JSON lines, CRD3 episodes and LoCoMo conversations, recognised by their content,
and refused with the place named when they are broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.errors import InvalidRequest
from story.transcripts import TranscriptFormat, TranscriptInvalid, parse_transcript, read_transcript
from tests.corpus import corpus_file

pytestmark = pytest.mark.unit


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def jsonl(*rows: object) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def refused(path: Path) -> str:
    with pytest.raises(TranscriptInvalid) as caught:
        read_transcript(path)
    return str(caught.value)


# -- the three formats ------------------------------------------------------------------------------


def test_json_lines_with_optional_fields(tmp_path: Path) -> None:
    path = write(
        tmp_path / "table.jsonl",
        jsonl(
            {"session": "1", "time": "spring, year 3", "speaker": "Ada", "text": "We ride at dawn.", "ref": "a1"},
            {"speaker": "Bo", "text": "  Not before breakfast.  ", "session": 1},
        )
        + "\n   \n"  # blank lines are skipped
        + jsonl({"session": 2, "speaker": "Ada", "text": "The bridge is out.", "ref": 17, "extra": "ignored"}),
    )
    transcript = read_transcript(path)
    assert transcript.format is TranscriptFormat.JSONL
    assert transcript.name == "table"
    first, second, third = transcript.lines
    assert (first.session, first.time, first.speaker, first.ref) == ("1", "spring, year 3", "Ada", "a1")
    assert (second.session, second.time, second.text, second.ref) == ("1", None, "Not before breakfast.", None)
    assert (third.session, third.ref) == ("2", "17")
    sessions = transcript.sessions()
    assert [(s.session, s.time, len(s.lines)) for s in sessions] == [("1", "spring, year 3", 2), ("2", None, 1)]


def test_a_line_without_session_is_in_session_1(tmp_path: Path) -> None:
    transcript = read_transcript(write(tmp_path / "one.jsonl", jsonl({"speaker": "Ada", "text": "Hello."})))
    assert transcript.format is TranscriptFormat.JSONL
    assert [(line.session, line.text) for line in transcript.lines] == [("1", "Hello.")]


def test_a_crd3_episode(tmp_path: Path) -> None:
    episode = {
        "METADATA": {"Wiki Blurb": []},
        "TURNS": [
            {"NAMES": ["MATT"], "UTTERANCES": ["Welcome back,", "everyone."], "NUMBER": 0},
            {"NAMES": ["LAURA", "SAM"], "UTTERANCES": ["Hi!"], "NUMBER": 1},
        ],
    }
    transcript = read_transcript(write(tmp_path / "C9E042.json", json.dumps(episode, indent=2)))
    assert transcript.format is TranscriptFormat.CRD3
    assert [(x.session, x.speaker, x.text, x.ref) for x in transcript.lines] == [
        ("C9E042", "MATT", "Welcome back, everyone.", "C9E042:0"),
        ("C9E042", "LAURA, SAM", "Hi!", "C9E042:1"),
    ]
    assert len(transcript.sessions()) == 1


def test_a_locomo_conversation(tmp_path: Path) -> None:
    conversation = {
        "speaker_a": "Ann",
        "speaker_b": "Ben",
        "session_2_date_time": "3:00 pm on 2 May, 2023",
        "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Back again."}],
        "session_10_date_time": "9:00 am on 1 June, 2023",
        "session_10": [
            {
                "speaker": "Ann",
                "dia_id": "D10:1",
                "text": "Look at this!",
                "img_url": ["https://example.invalid/x.jpg"],
                "blip_caption": "a photo of a red kite over a beach",
            }
        ],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Ben!"}],
        "session_11_date_time": "no session list: ignored",
        "qa": [{"question": "?", "answer": "!", "evidence": ["D1:1"], "category": 4}],
    }
    transcript = read_transcript(write(tmp_path / "77.json", json.dumps(conversation)))
    assert transcript.format is TranscriptFormat.LOCOMO
    assert [(x.session, x.ref) for x in transcript.lines] == [("1", "D1:1"), ("2", "D2:1"), ("10", "D10:1")]
    assert transcript.lines[2].text == "Look at this! [shares a photo: a photo of a red kite over a beach]"
    assert [(s.session, s.time) for s in transcript.sessions()] == [
        ("1", "1:56 pm on 8 May, 2023"),
        ("2", "3:00 pm on 2 May, 2023"),
        ("10", "9:00 am on 1 June, 2023"),
    ]


def test_real_corpus_files() -> None:
    locomo = corpus_file("memory/locomo-dev/26.json")
    crd3 = corpus_file("memory/crd3/C1E001.json")
    conversation = read_transcript(locomo)
    assert conversation.format is TranscriptFormat.LOCOMO
    assert len(conversation.lines) == 419  # the count its README gives
    assert len(conversation.sessions()) == 19
    assert conversation.lines[0].ref == "D1:1" and conversation.lines[-1].ref == "D19:15"
    photos = [x for x in conversation.lines if "[shares a photo: " in x.text]
    raw = json.loads(locomo.read_text())
    shared = [t for k, v in raw.items() if k.startswith("session_") and isinstance(v, list) for t in v]
    assert len(photos) == sum(1 for t in shared if t.get("blip_caption"))
    episode = read_transcript(crd3)
    assert episode.format is TranscriptFormat.CRD3
    assert len(episode.lines) == len(json.loads(crd3.read_text())["TURNS"])
    assert episode.lines[2].speaker == "TRAVIS" and episode.lines[2].ref == "C1E001:2"


# -- refused, with the place named ------------------------------------------------------------------


def test_an_empty_file(tmp_path: Path) -> None:
    assert "is empty" in refused(write(tmp_path / "empty.jsonl", ""))
    assert "is empty" in refused(write(tmp_path / "blank.jsonl", "\n  \n"))


def test_a_malformed_line_names_its_number(tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.jsonl",
        jsonl({"speaker": "Ada", "text": "one"}, {"speaker": "Bo", "text": "two"}) + '{"speaker": "Ada", "text": \n',
    )
    message = refused(path)
    assert f"{path}:3: malformed JSON" in message


def test_missing_speaker_or_text_names_the_line(tmp_path: Path) -> None:
    no_speaker = write(tmp_path / "a.jsonl", jsonl({"speaker": "Ada", "text": "hi"}, {"text": "who said this?"}))
    assert f"{no_speaker}:2: missing speaker" in refused(no_speaker)
    no_text = write(tmp_path / "b.jsonl", jsonl({"speaker": "Ada", "text": "   "}))
    assert f"{no_text}:1: missing text" in refused(no_text)
    wrong_type = write(tmp_path / "c.jsonl", jsonl({"speaker": "Ada", "text": ["a", "list"]}))
    assert f"{wrong_type}:1: text must be a string, not list" in refused(wrong_type)
    not_object = write(tmp_path / "d.jsonl", jsonl({"speaker": "Ada", "text": "hi"}, ["Ada", "hi"]))
    assert f"{not_object}:2: expected a JSON object" in refused(not_object)


def test_unknown_shapes(tmp_path: Path) -> None:
    assert "unknown transcript shape" in refused(write(tmp_path / "list.json", json.dumps([{"CHUNK": "x"}])))
    assert "unknown transcript shape" in refused(write(tmp_path / "dict.json", json.dumps({"title": "x"}, indent=1)))
    assert "unknown transcript shape" in refused(write(tmp_path / "num.json", "42"))


def test_broken_corpus_shaped_files(tmp_path: Path) -> None:
    crd3 = write(tmp_path / "C1E001.json", json.dumps({"TURNS": [{"NAMES": ["MATT"], "UTTERANCES": "not a list"}]}))
    assert "TURNS[0]: UTTERANCES must be a list" in refused(crd3)
    nameless = write(tmp_path / "C1E002.json", json.dumps({"TURNS": [{"NAMES": [], "UTTERANCES": ["hi"]}]}))
    assert "TURNS[0]: missing NAMES (speaker)" in refused(nameless)
    locomo = write(
        tmp_path / "9.json",
        json.dumps({"session_1": [{"speaker": "Ann", "text": "hi"}, {"dia_id": "D1:2", "text": "who?"}]}),
    )
    assert "session_1[1]: missing speaker" in refused(locomo)
    truncated = write(tmp_path / "cut.json", '{\n  "TURNS": [\n    {"NAMES": ["MATT"],\n')
    assert f"{truncated}:4: malformed JSON" in refused(truncated)


def test_unreadable_files(tmp_path: Path) -> None:
    assert "cannot read it" in refused(tmp_path / "missing.jsonl")
    assert "not UTF-8" in refused(write(tmp_path / "latin.jsonl", '{"speaker": "Zoë"}'.encode("latin-1")))


def test_a_session_must_be_contiguous() -> None:
    transcript = parse_transcript(
        jsonl(
            {"session": "1", "speaker": "A", "text": "a"},
            {"session": "2", "speaker": "A", "text": "b"},
            {"session": "1", "speaker": "A", "text": "c"},
        ),
        name="jumbled",
    )
    with pytest.raises(TranscriptInvalid, match="session '1' resumes after session '2'"):
        transcript.sessions()


def test_the_error_is_a_400_an_api_reports_as_such(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read_transcript(write(tmp_path / "empty.jsonl", ""))
    assert caught.value.status_code == 400
    assert caught.value.client_message.startswith("transcript: ")
