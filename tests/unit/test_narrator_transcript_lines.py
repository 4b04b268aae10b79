"""The prompt's recent turns name who spoke each input, as the transcript did."""

from __future__ import annotations

import pytest

from narrator.context import turn_lines
from schemas.campaign import Speaker, SpeakerKind, Turn, TurnStatus

pytestmark = pytest.mark.unit


def _turn(speaker: Speaker, text: str, narration: str | None = None, depth: int = 0) -> Turn:
    return Turn(
        campaign_id="campaign-1",
        branch_id="branch-1",
        parent_turn_id=None if depth == 0 else "turn-parent",
        depth=depth,
        speaker=speaker,
        text=text,
        narration=narration,
        status=TurnStatus.ACCEPTED if narration else TurnStatus.RECORDED,
    )


def test_each_input_is_said_by_its_speaker() -> None:
    turns = [
        _turn(Speaker(kind=SpeakerKind.PLAYER, name="Caroline"), "I went to the support group yesterday."),
        _turn(Speaker(kind=SpeakerKind.PLAYER), "I open the door.", "It creaks open.", depth=1),
        _turn(Speaker(kind=SpeakerKind.GM), "The storm breaks.", depth=2),
        _turn(Speaker(kind=SpeakerKind.ENTITY, entity_id="entity-hulda"), "Bandits took the caravan.", depth=3),
    ]
    assert turn_lines(turns, {"entity-hulda": "Hulda the smith"}) == [
        "Caroline: I went to the support group yesterday.",
        "Player: I open the door.",
        "Narrator: It creaks open.",
        "GM: The storm breaks.",
        "Hulda the smith: Bandits took the caravan.",
    ]
