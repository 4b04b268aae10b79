"""Reading transcripts: JSON lines, CRD3 episodes and LoCoMo conversations, recognised by their content,
and refused with the place named when they are broken."""

from __future__ import annotations

import json
import os
import threading
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


# -- checked whole before anything is written: the file, the line and the field named ---------------


def many(n: int, **changes: object) -> list[dict[str, object]]:
    """``n`` JSON lines in three sessions; ``changes`` maps a line number (1-based, as ``l<N>``) to a field."""
    rows: list[dict[str, object]] = [
        {"session": str(1 + 3 * i // n), "speaker": "Ada" if i % 2 else "Bo", "text": f"line {i + 1}"} for i in range(n)
    ]
    for key, change in changes.items():
        rows[int(key[1:]) - 1].update(change)  # type: ignore[call-overload]
    return rows


def test_a_nul_character_names_its_line_and_field(tmp_path: Path) -> None:
    """An escaped NUL (JSON's \\u0000) used to pass the reader and stop the import at the graph write, after
    the sessions before it were written, with a message naming the data folder."""
    late = write(tmp_path / "late.jsonl", jsonl(*many(3000, l2501={"text": "a\u0000b"})))
    assert refused(late) == f"transcript: {late}:2501: text holds a NUL character (at character 2)"
    first = write(tmp_path / "first.jsonl", jsonl(*many(30, l1={"speaker": "\u0000Ada"})))
    assert f"{first}:1: speaker holds a NUL character" in refused(first)
    raw = write(tmp_path / "raw.jsonl", jsonl(*many(5)).replace("line 4", "line\x004"))
    assert f"{raw}:4: a NUL character at column" in refused(raw)


def test_a_lone_surrogate_names_its_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", jsonl(*many(6, l5={"ref": "x\ud800"})))
    assert f"{path}:5: ref holds a lone surrogate (U+D800 at character 2)" in refused(path)


def test_over_long_fields_name_their_line_and_field(tmp_path: Path) -> None:
    """They used to fail validation with a traceback naming no line."""
    time = write(tmp_path / "t.jsonl", jsonl(*many(9, l7={"time": "x" * 201})))
    assert f"{time}:7: time is 201 characters long; at most 200 are kept" in refused(time)
    ref = write(tmp_path / "r.jsonl", jsonl(*many(9, l8={"ref": "r" * 501})))
    assert f"{ref}:8: ref is 501 characters long; at most 500" in refused(ref)
    text = write(tmp_path / "x.jsonl", jsonl(*many(9, l2={"text": "w " * 30_000})))
    assert f"{text}:2: text is 59,999 characters long; at most 50,000" in refused(text)
    speaker = write(tmp_path / "p.jsonl", jsonl(*many(9, l3={"speaker": "S" * 301})))
    assert f"{speaker}:3: speaker is 301 characters long" in refused(speaker)


def locomo(**sessions: object) -> str:
    return json.dumps({"speaker_a": "Ann", "speaker_b": "Ben", **sessions}, indent=2)


TURN = {"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}


def line_of(path: Path, needle: str) -> int:
    """The number of the file's first line holding ``needle``."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


def test_a_locomo_session_key_with_leading_zeros_names_its_line(tmp_path: Path) -> None:
    """``session_01`` crashed the reader with a KeyError."""
    path = write(tmp_path / "z.json", locomo(session_1=[TURN], session_01=[TURN]))
    assert refused(path) == (
        f"transcript: {path}:{line_of(path, 'session_01')}: key 'session_01': "
        "a LoCoMo session is session_<n> without leading zeros (session_1)"
    )


def test_a_locomo_session_that_is_not_a_list_is_refused_not_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", locomo(session_1=[TURN], session_2="Ann and Ben talk about the weather"))
    assert f"{path}:{line_of(path, 'session_2')}: session_2 is a string, not a list of turns" in refused(path)
    alone = write(tmp_path / "a.json", locomo(session_1="only a string"))
    assert f"{alone}:{line_of(alone, 'session_1')}: session_1 is a string" in refused(alone)


def test_locomo_and_crd3_errors_name_the_line_of_the_turn(tmp_path: Path) -> None:
    turns = [TURN, {**TURN, "dia_id": "D1:2"}, {"speaker": "Ben", "dia_id": "D1:3", "text": "\u0000"}]
    path = write(tmp_path / "l.json", locomo(session_1=turns))
    assert f"{path}:{line_of(path, 'D1:3') - 2}: session_1[2]: text holds a NUL character" in refused(path)
    crd3 = {"TURNS": [{"NAMES": ["MATT"], "UTTERANCES": ["hi"], "NUMBER": 0}, {"NAMES": ["X" * 400], "UTTERANCES": []}]}
    episode = write(tmp_path / "C1E009.json", json.dumps(crd3, indent=1))
    assert f"{episode}:{line_of(episode, 'XXXX') - 2}: TURNS[1]: NAMES (speaker) is 400 characters long" in refused(
        episode
    )


def test_unknown_fields_and_skipped_sessions_are_reported(tmp_path: Path) -> None:
    rows = many(4, l2={"emotion": "glad"}, l3={"emotion": "sad", "mood": 1})
    transcript = read_transcript(write(tmp_path / "u.jsonl", jsonl(*rows)))
    assert (transcript.unknown_fields, transcript.skipped) == ({"emotion": 2, "mood": 1}, [])
    path = write(
        tmp_path / "k.json",
        locomo(
            session_1=[{**TURN, "mood": "glad"}],
            session_1_date_time="1 May",
            session_2=[],
            session_3_date_time="3 May",
            notes="x",
        ),
    )
    transcript = read_transcript(path)
    assert transcript.unknown_fields == {"session_N[].mood": 1, "notes": 1}
    assert transcript.skipped == [
        f"session_2 ({path}:{line_of(path, 'session_2')}): no turns",
        f"session_3_date_time ({path}:{line_of(path, 'session_3')}): no session_3 to go with it",
    ]


def test_encodings(tmp_path: Path) -> None:
    """UTF-16 and UTF-32 with a byte-order mark are read; Latin-1 is refused naming its line and column."""
    rows = ({"speaker": "Zoë", "text": "ça va"}, {"speaker": "Bo", "text": "oui"})
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    for codec in ("utf-16", "utf-32", "utf-8-sig"):
        transcript = read_transcript(write(tmp_path / f"{codec}.jsonl", text.encode(codec)))
        assert [line.speaker for line in transcript.lines] == ["Zoë", "Bo"]
    latin = write(tmp_path / "latin.jsonl", ('{"speaker": "Bo", "text": "hi"}\n' + text).encode("latin-1"))
    assert f"{latin}:2: not UTF-8 text (byte 0xEB at column 16); save it as UTF-8" in refused(latin)
    no_bom = write(tmp_path / "le.jsonl", text.encode("utf-16-le"))
    assert f"{no_bom}:1: not UTF-8 text (byte 0xEB at column 31); it looks like UTF-16 without" in refused(no_bom)
    no_bom = write(tmp_path / "le.jsonl", text.replace("ë", "e").replace("ç", "c").encode("utf-16-le"))
    assert f"{no_bom}:1: a NUL character at column 2 (the file looks like UTF-16 without a byte-order mark" in refused(
        no_bom
    )


def test_anything_but_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO blocked the reader forever (nobody writes to it)."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    outcome: list[str] = []
    reader = threading.Thread(target=lambda: outcome.append(refused(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # let the blocked reader go before failing
        with open(fifo, "w") as unblock:
            unblock.write("\n")
        pytest.fail("reading a FIFO blocked")
    assert outcome == [
        f"transcript: {fifo}: is a FIFO (named pipe), not a transcript file; give the path of a regular file"
    ]
    assert "/dev/null: is a character device" in refused(Path("/dev/null"))
    assert f"{tmp_path}: is a folder" in refused(tmp_path)
