"""How far a transcript import into a campaign got: the record an unfinished import keeps on its campaign.

A transcript import writes a campaign in many story transactions, then makes its recall index agree with
the graph. Until both are done the campaign carries a :class:`TranscriptImportState` (``Campaign.transcript_import``):
listed with it, refused for play, and resumed from ``written`` by ``lorekeeper campaign import-transcript FILE
--resume`` (or discarded whole by ``lorekeeper campaign discard-import``). A finished import clears it.
"""

from pydantic import Field, NonNegativeInt

from schemas.common import LorekeeperModel, UtcDatetime, utc_now

__all__ = ["TranscriptImportState"]


class TranscriptImportState(LorekeeperModel):
    """An unfinished transcript import: which transcript, and how many of its lines the graph holds."""

    source: str = Field(min_length=1, max_length=500, description="The transcript's name (its file's stem).")
    format: str = Field(min_length=1, max_length=20, description="jsonl, crd3 or locomo.")
    fingerprint: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of the transcript's lines: a resume is refused for any other transcript.",
    )
    lines: NonNegativeInt = Field(description="The transcript's lines, one turn each.")
    written: NonNegativeInt = Field(default=0, description="Lines written to the graph so far (whole transactions).")
    summaries: bool = Field(default=True, description="Whether each session gets its scene summary.")
    new_world: bool = Field(
        default=False, description="The import created the campaign's world (discarded with it when left empty)."
    )
    started_at: UtcDatetime = Field(default_factory=utc_now)
