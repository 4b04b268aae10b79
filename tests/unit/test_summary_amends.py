"""The words a retcon amends in a summary or memory (story/summary_amends.py): a retold record's words replaced, a
record retconned with nothing in its place taken out of the list it stands in (an emptied list goes), words in a
free sentence kept and said never to have been, and a summary of the end that made a retold record told it."""

from __future__ import annotations

import pytest

from story.summary_amends import Retold, amended

pytestmark = pytest.mark.unit

SUMMARY = "The court: Vesna takes the throne. What became true: Harrowgate ruler Lady Vesna; The bridge burns."


def _retold(words: str, replacement: str | None = None) -> Retold:
    return Retold("rec_1", [words], replacement)


def test_a_retold_records_words_are_replaced_wherever_they_stand() -> None:
    text, records = amended(SUMMARY, [_retold("The bridge burns", "The bridge holds")])
    assert text == SUMMARY.replace("The bridge burns", "The bridge holds") and records == ["rec_1"]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("Harrowgate ruler Lady Vesna", "The court: Vesna takes the throne. What became true: The bridge burns."),
        ("The bridge burns", "The court: Vesna takes the throne. What became true: Harrowgate ruler Lady Vesna."),
    ],
)
def test_a_record_with_nothing_in_its_place_leaves_the_list(words: str, expected: str) -> None:
    assert amended(SUMMARY, [_retold(words)]) == (expected, ["rec_1"])


def test_a_list_left_empty_goes_and_the_middle_of_a_list_closes_up() -> None:
    memory = "Osk remembers the ford: the raft bumps the bank. Afterwards: Osk ferryman_of the ford."
    assert amended(memory, [_retold("Osk ferryman_of the ford")])[0] == (
        "Osk remembers the ford: the raft bumps the bank."
    )
    three = "What became true: A one; B two; C three."
    assert amended(three, [_retold("B two")])[0] == "What became true: A one; C three."


def test_words_in_a_free_sentence_are_kept_and_said_never_to_have_been() -> None:
    gm = "The bridge burns while the court looks on."
    text, records = amended(gm, [_retold("The bridge burns")])
    assert text == gm + " Retconned: The bridge burns never was." and records == ["rec_1"]


def test_a_summary_of_the_end_that_made_a_retold_record_is_told_it_even_without_its_words() -> None:
    gm = "The court met and the town watched the river."
    assert amended(gm, [_retold("The bridge burns", "The bridge holds")]) == (gm, [])
    text, records = amended(gm, [_retold("The bridge burns", "The bridge holds")], told_by_end=True)
    assert text == gm + " Since retold: The bridge holds." and records == ["rec_1"]
    # a retcon with nothing in its place adds nothing where the words never stood
    assert amended(gm, [_retold("The bridge burns")], told_by_end=True) == (gm, [])
