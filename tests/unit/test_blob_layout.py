"""The bucket layout: key builders, filename sanitising, key / prefix / bucket validation."""

from __future__ import annotations

import hashlib
import pickle

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from schemas.errors import InvalidRequest
from stores.blob import layout
from stores.blob.layout import (
    MAX_FILENAME_BYTES,
    chunk_key,
    chunk_sequence,
    content_key,
    image_key,
    original_key,
    sanitize_filename,
    upload_key,
    validate_bucket,
    validate_key,
    validate_prefix,
)

pytestmark = pytest.mark.unit

SHA = hashlib.sha256(b"x").hexdigest()


# -- key builders --------------------------------------------------------------------------------


def test_original_key() -> None:
    assert original_key("u1", "Rulebook.pdf") == "items/u1/original/Rulebook.pdf"
    assert original_key("u1", "Player's Handbook (5e).PDF") == "items/u1/original/Player_s_Handbook_5e.PDF"


@pytest.mark.parametrize(
    ("sequence", "name"),
    [
        (0, "chunk_000.txt"),
        (7, "chunk_007.txt"),
        (42, "chunk_042.txt"),
        (999, "chunk_999.txt"),
        (1000, "chunk_1000.txt"),
        (123456, "chunk_123456.txt"),
    ],
)
def test_chunk_key_is_zero_padded_to_at_least_three_digits(sequence: int, name: str) -> None:
    assert chunk_key("u1", sequence) == f"items/u1/chunks/{name}"
    assert chunk_sequence(chunk_key("u1", sequence)) == sequence


@pytest.mark.parametrize("sequence", [-1, 1.0, "3", True, None])
def test_chunk_key_needs_a_non_negative_int(sequence: object) -> None:
    with pytest.raises(InvalidRequest, match="chunk sequence"):
        chunk_key("u1", sequence)  # type: ignore[arg-type]


def test_chunk_sequence_sorts_chunks_past_999() -> None:
    keys = sorted(chunk_key("u", n) for n in (0, 2, 999, 1000, 1001))
    assert keys[0] == "items/u/chunks/chunk_000.txt" and keys[1] == "items/u/chunks/chunk_002.txt"
    assert [chunk_sequence(k) for k in sorted(keys, key=chunk_sequence)] == [0, 2, 999, 1000, 1001]


@pytest.mark.parametrize(
    "key",
    [
        "items/u/chunks/chunk_1.txt",
        "items/u/chunks/other.txt",
        "images/u/chunks/chunk_000.txt",
        "chunk_000.txt",
    ],
)
def test_chunk_sequence_rejects_other_keys(key: str) -> None:
    with pytest.raises(InvalidRequest):
        chunk_sequence(key)


def test_image_key() -> None:
    assert image_key("u1", "Carte du monde.png") == "images/u1/Carte_du_monde.png"


def test_upload_key() -> None:
    assert upload_key("job_1", "Règles du jeu.pdf") == "uploads/job_1/Règles_du_jeu.pdf"


def test_content_key() -> None:
    assert content_key(SHA) == f"cas/{SHA}"
    assert content_key(SHA.upper()) == f"cas/{SHA}"
    assert content_key(SHA, prefix="media/cas") == f"media/cas/{SHA}"
    for bad in ("", "abc", SHA[:-1] + "g", SHA + "0"):
        with pytest.raises(InvalidRequest, match="SHA-256"):
            content_key(bad)
    with pytest.raises(InvalidRequest):
        content_key(SHA, prefix="../cas")


@pytest.mark.parametrize("uid", ["", ".", "..", "a/b", "nul\x00", "line\n"])
def test_ids_must_be_one_clean_segment(uid: str) -> None:
    for build in (
        lambda: original_key(uid, "f.pdf"),
        lambda: chunk_key(uid, 0),
        lambda: image_key(uid, "f.png"),
        lambda: upload_key(uid, "f.pdf"),
    ):
        with pytest.raises(InvalidRequest):
            build()


# -- filenames -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Rulebook.pdf", "Rulebook.pdf"),
        ("Player's Handbook (5e).PDF", "Player_s_Handbook_5e.PDF"),
        ("Règles du jeu.md", "Règles_du_jeu.md"),
        ("Grimoire des Ombres — Règles (v2).pdf", "Grimoire_des_Ombres_Règles_v2.pdf"),
        ("日本語のルール.txt", "日本語のルール.txt"),
        ("Ελληνικά κείμενα.html", "Ελληνικά_κείμενα.html"),
        ("../../etc/passwd", "passwd"),
        ("C:\\books\\Monster Manual.pdf", "Monster_Manual.pdf"),
        (".bashrc", "bashrc"),
        ("..", "file"),
        ("", "file"),
        ("???.pdf", "file.pdf"),
        ("tab\tand\nnewline.txt", "tab_and_newline.txt"),
        ("archive.tar.gz", "archive.tar.gz"),
        ("trailing dot.", "trailing_dot"),
        ("v1.2 final!.docx", "v1.2_final.docx"),
        ("snake_case-and-dash.txt", "snake_case-and-dash.txt"),
        ("emoji 🐉 dragon.png", "emoji_dragon.png"),
    ],
)
def test_sanitize_filename(raw: str, clean: str) -> None:
    assert sanitize_filename(raw) == clean


def test_sanitize_filename_normalises_unicode() -> None:
    decomposed = "Re\u0300gles.pdf"  # "e" + combining grave, as macOS file names come
    assert sanitize_filename(decomposed) == "Règles.pdf" == sanitize_filename("Règles.pdf")


def test_sanitize_filename_cuts_long_names_but_keeps_the_extension() -> None:
    name = sanitize_filename("é" * 300 + ".pdf")
    assert name.endswith(".pdf")
    assert len(name.encode()) <= MAX_FILENAME_BYTES
    assert set(name[:-4]) == {"é"}


def test_sanitize_filename_refuses_non_strings() -> None:
    with pytest.raises(InvalidRequest):
        sanitize_filename(b"bytes.pdf")  # type: ignore[arg-type]


@given(st.text(max_size=400))
@example("0.00000000\U00010000:\U00010600")  # an extension cut to 16 bytes right after a run made "_"
def test_any_filename_makes_a_valid_key(raw: str) -> None:
    clean = sanitize_filename(raw)
    assert clean and "/" not in clean and "\\" not in clean
    assert not clean.startswith(".") and len(clean.encode()) <= MAX_FILENAME_BYTES
    assert validate_key(original_key("u", raw)) == f"items/u/original/{clean}"
    assert sanitize_filename(clean) == clean  # idempotent


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "a/b/c.txt",
        "items/u/original/Règles.pdf",
        "unicode/日本語/ファイル.txt",
        ".hidden/x",
        "a..b/c",
        "spaces are fine",
        "x" * 1024,
        "é" * 512,
    ],
)
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("/abs", "relative"),
        ("a//b", "segment"),
        ("a/", "segment"),
        (".", "segment"),
        ("..", "segment"),
        ("a/./b", "segment"),
        ("a/../b", "segment"),
        ("nul\x00", "control"),
        ("bell\x07", "control"),
        ("del\x7f", "control"),
        ("c1\x85", "control"),
        ("x" * 1025, "1024 bytes"),
        ("é" * 513, "1024 bytes"),
        ("lone\ud800", "surrogate"),
    ],
)
def test_invalid_keys(key: str, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason) as caught:
        validate_key(key)
    assert caught.value.status_code == 400
    assert len(caught.value.message) < 300  # long keys are shortened in messages


def test_invalid_key_types() -> None:
    with pytest.raises(InvalidRequest, match="string"):
        validate_key(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "items", "items/", "items/u1/ch", "items/.", "a..b/"])
def test_valid_prefixes(prefix: str) -> None:
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/abs", "a//", "../x", "a/../", "./x", "nul\x00", "x" * 1025, 3])
def test_invalid_prefixes(prefix: str) -> None:
    with pytest.raises(InvalidRequest):
        validate_prefix(prefix)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["abc", "lorekeeper", "my-bucket.v2", "a" * 63, "0bucket9"])
def test_valid_buckets(name: str) -> None:
    assert validate_bucket(name) == name


@pytest.mark.parametrize(
    "name",
    ["ab", "a" * 64, "Upper", "under_score", "-start", "end-", "a..b", "a.-b", "192.168.0.1", "", None],
)
def test_invalid_buckets(name: str) -> None:
    with pytest.raises(InvalidRequest, match="bucket"):
        validate_bucket(name)


def test_layout_errors_pickle() -> None:
    with pytest.raises(InvalidRequest) as caught:
        validate_key("a//b")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is InvalidRequest and copy.message == caught.value.message
    assert layout.DEFAULT_CAS_PREFIX == "cas"
