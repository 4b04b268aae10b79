"""Reading an extracted document's rule facts at ingest (jobs/rule_facts.py), without stores: which
tables the settings choose, which chunk and page each fact lands on, and what states nothing."""

from __future__ import annotations

import pytest

from jobs.chunk import chunk_document
from jobs.document import Block, BlockKind, ExtractedDocument
from jobs.extract import extract_document
from jobs.pipeline import run_ingest
from jobs.plan import IngestOptions, fit_chunking
from jobs.rows import chunk_uid
from jobs.rule_facts import FactsRead, read_facts, rule_tables
from jobs.tokens import TokenCounter
from rulebook import TableError, builtin_tables
from schemas.knowledge import ChunkingDefaults, Library, LibraryType
from schemas.settings import Settings

HEADING, PARAGRAPH = BlockKind.HEADING, BlockKind.PARAGRAPH


def _doc(blocks: list[Block]) -> ExtractedDocument:
    return ExtractedDocument(blocks=blocks, page_count=max((b.page or 1) for b in blocks))


def _read(doc: ExtractedDocument, chunking: ChunkingDefaults | None = None) -> tuple[FactsRead, list]:
    chunking = chunking or fit_chunking(Library(name="x", type=LibraryType.RULEBOOK).effective_chunking(), 256)
    chunks = chunk_document(doc, chunking, TokenCounter())
    return read_facts(doc, chunks, "item_book", rule_tables(Settings())), chunks


@pytest.mark.unit
def test_tables_default_to_every_shipped_family_and_a_bad_name_is_refused(tmp_path) -> None:
    assert [t.family for t in rule_tables(Settings())] == list(builtin_tables())
    assert [t.family for t in rule_tables(Settings(rule_families=["fate"]))] == ["fate"]
    with pytest.raises(TableError, match="no such family"):
        rule_tables(Settings(rule_families=["dnd3"]))
    bad = tmp_path / "house.toml"
    bad.write_text("family = 'house'\n[kinds.spell\n", encoding="utf-8")
    with pytest.raises(TableError, match="house.toml"):
        rule_tables(Settings(rule_families=[str(bad)]))


@pytest.mark.ray  # calls run_ingest (which refuses the settings before it starts Ray)
def test_an_ingest_with_a_bad_family_fails_before_it_starts(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path / "data", rule_families=["dnd3"])
    with pytest.raises(TableError, match="dnd3"):
        run_ingest([str(tmp_path)], IngestOptions(library="x"), settings=settings)
    assert not (tmp_path / "data").exists()  # nothing was opened


@pytest.mark.unit
def test_a_stat_block_over_a_page_break_gives_each_fact_its_page() -> None:
    doc = _doc(
        [
            Block(HEADING, "Monsters", page=4, level=1),
            Block(HEADING, "Goblin", page=4, level=2),
            Block(PARAGRAPH, "Small humanoid (goblinoid), neutral evil", page=4),
            Block(PARAGRAPH, "Armor Class 15 (leather armor, shield)", page=4, bold_terms=["Armor Class"]),
            Block(PARAGRAPH, "Hit Points 7 (2d6)", page=4, bold_terms=["Hit Points"]),
            Block(PARAGRAPH, "Speed 30 ft.", page=5, bold_terms=["Speed"]),
            Block(PARAGRAPH, "Challenge 1/4 (50 XP)", page=5, bold_terms=["Challenge"]),
        ]
    )
    read, chunks = _read(doc)
    pages = {f.predicate: f.page for f in read.facts}
    assert pages["armor_class"] == 4 and pages["hit_points"] == 4
    assert pages["speed"] == 5 and pages["challenge_rating"] == 5
    assert {f.chunk_id for f in read.facts} == {chunk_uid("item_book", chunks[0].sequence)}
    assert read.entries == 1 and read.by_kind == {"creature": len(read.facts)}


@pytest.mark.unit
def test_an_entry_cut_into_two_chunks_puts_each_fact_on_the_chunk_holding_it() -> None:
    filler = " ".join(["The goblin sneaks along the wall and waits for a careless traveller."] * 6)
    doc = _doc(
        [
            Block(HEADING, "Goblin", page=1, level=1),
            Block(PARAGRAPH, "Small humanoid (goblinoid), neutral evil", page=1),
            Block(PARAGRAPH, "Armor Class 15 (leather armor, shield)", page=1),
            Block(PARAGRAPH, "Hit Points 7 (2d6)", page=1),
            Block(PARAGRAPH, filler, page=1),
            Block(PARAGRAPH, "Speed 30 ft.", page=2),
            Block(PARAGRAPH, "Challenge 1/4 (50 XP)", page=2),
        ]
    )
    rulebook = Library(name="x", type=LibraryType.RULEBOOK).effective_chunking()
    small = rulebook.model_copy(update={"target_tokens": 60, "max_tokens": 120, "overlap_tokens": 0})
    read, chunks = _read(doc, small)
    assert len(chunks) >= 2
    holder = {f.predicate: f.chunk_id for f in read.facts}
    text_of = {chunk_uid("item_book", c.sequence): c.text for c in chunks}
    for predicate, raw in (("armor_class", "Armor Class 15"), ("hit_points", "Hit Points 7"), ("speed", "Speed 30")):
        assert raw in text_of[holder[predicate] or ""], predicate
    assert holder["armor_class"] != holder["challenge_rating"]


@pytest.mark.unit
def test_a_document_without_headings_states_nothing() -> None:
    doc = _doc([Block(PARAGRAPH, "Armor Class 15\nHit Points 7 (2d6)\nSpeed 30 ft.", page=1)])
    assert _read(doc)[0].facts == []


@pytest.mark.unit
def test_a_markdown_rulebook_reads_as_extraction_leaves_it() -> None:
    text = "# Spells\n\n## Fireball\n\n*3rd-level evocation*\n\n**Range:** 150 feet\n**Duration:** Instantaneous\n"
    doc = extract_document(text.encode(), "spells.md")
    read, chunks = _read(doc)
    facts = {f.predicate: f for f in read.facts}
    assert facts["range"].raw == "Range: 150 feet" and facts["range"].page is None  # Markdown has no pages
    assert facts["range"].chunk_id == chunk_uid("item_book", chunks[0].sequence)
    assert read.by_kind == {"spell": len(read.facts)}


GODS = """# Gods of the Deep

## Thunder

**Also called.** The Drummer Below

**Domains.** Storms, oaths

## Tide

**Also called.** The Patient One

**Domains.** Sea, time
"""

BESTIARY = """# Bestiary

## Goblin

*Small humanoid (goblinoid), neutral evil*

**Armor Class** 15 (leather armor, shield)
**Hit Points** 7 (2d6)
**Speed** 30 ft.

## Goblin Lore

**Also called.** Hob-kin
"""


@pytest.mark.unit
def test_a_book_no_family_claims_states_generic_facts_and_a_dnd_book_its_own() -> None:
    """Every shipped table is in play by default; the generic fields of an entry no kind claims are
    named for the book's own family (its entries vote), or ``generic`` when no family claims any."""
    tables = rule_tables(Settings())
    gods = extract_document(GODS.encode(), "gods.md")
    chunking = fit_chunking(Library(name="x", type=LibraryType.RULEBOOK).effective_chunking(), 256)
    chunks = chunk_document(gods, chunking, TokenCounter())
    plain = read_facts(gods, chunks, "item_book", tables, order_by_document=True)
    assert plain.facts and {f.family for f in plain.facts} == {"generic"}
    assert {f.predicate for f in plain.facts} >= {"also_called", "domains"}

    book = extract_document(BESTIARY.encode(), "bestiary.md")
    chunks = chunk_document(book, chunking, TokenCounter())
    read = read_facts(book, chunks, "item_book", tables, order_by_document=True)
    assert {(f.subject.key, f.family) for f in read.facts} == {("goblin", "dnd5e"), ("goblin lore", "dnd5e")}
