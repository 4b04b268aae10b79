"""Memories that form themselves at scene end: the extractive former on a scripted scene, and the story
service forming, indexing and recalling them (per observer), idempotently, without ever failing the
gate's canon."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from schemas.recall import RecallKind
from schemas.story import InputMode, Memory, Scene, Speaker, SpeakerKind, SubjectiveKind, SummaryScope, Turn
from story.formation import (
    ExtractiveFormer,
    FormedScene,
    NamedEntity,
    centrality,
    sentences,
)
from story.scene_end import form_scene
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign

KEY = "The Millbrook caravan never arrived."

# (speaker, input mode, input, narration): a blacksmith tells the party about a missing caravan
FORGE: list[tuple[str | None, InputMode, str, str | None]] = [
    (
        "aria",
        InputMode.ACTION,
        "I push open the forge door and greet the smith.",
        "Heat rolls out of the smithy. Brenna the blacksmith looks up from her anvil.",
    ),
    ("bram", InputMode.DIALOGUE, "Have you seen any traders on the north road lately?", "Brenna sets down her hammer."),
    (
        "brenna",
        InputMode.DIALOGUE,
        f"{KEY} It left Millbrook eight days ago with iron for my forge, and nobody has seen it since.",
        None,
    ),
    (
        "aria",
        InputMode.ACTION,
        "I ask where the caravan was last seen.",
        '"The drivers were seen at the Old Mill crossing," Brenna says. '
        "She warns us that wolves have been hunting near the crossing.",
    ),
    (
        "bram",
        InputMode.ACTION,
        "We promise to look for it.",
        "Brenna nods and hands Aria a worn map of the north road.",
    ),
]


def _speaker(who: str | None, ids: dict[str, str]) -> Speaker:
    if who is None:
        return Speaker(kind=SpeakerKind.GM)
    if who == "brenna":
        return Speaker(kind=SpeakerKind.ENTITY, entity_id=ids[who])
    return Speaker(kind=SpeakerKind.PLAYER, entity_id=ids[who])


def _memories(formed: FormedScene, observer: str, kind: SubjectiveKind | None = None) -> list[Memory]:
    return [m for m in formed.memories if m.observer_entity_id == observer and (kind is None or m.kind is kind)]


# -- the extractive former, on the scene as plain records -------------------------------------------


def _scripted() -> tuple[Scene, list[Turn], dict[str, NamedEntity]]:
    cast = {
        "aria": NamedEntity("ent_aria", "Aria Vell"),
        "bram": NamedEntity("ent_bram", "Bram"),
        "brenna": NamedEntity("ent_brenna", "Brenna"),
        "cole": NamedEntity("ent_cole", "Cole"),
        "caravan": NamedEntity("ent_caravan", "Millbrook caravan", kind="item"),
    }
    ids = {k: v.entity_id for k, v in cast.items()}
    turns: list[Turn] = []
    for who, mode, text, narration in FORGE:
        turns.append(
            Turn(
                campaign_id="camp_forge",
                branch_id="br_main",
                parent_turn_id=turns[-1].id if turns else None,
                depth=len(turns),
                speaker=_speaker(who, ids),
                input_mode=mode,
                text=text,
                narration=narration,
                scene_id="scene_forge",
            )
        )
    scene = Scene(
        id="scene_forge",
        campaign_id="camp_forge",
        branch_id="br_main",
        order=1,
        title="The forge",
        participant_entity_ids=[ids["aria"], ids["bram"]],
        end_turn_id=turns[-1].id,
        canonical_outcomes=["Missing caravan: the Millbrook caravan is missing"],
    )
    return scene, turns, cast


@pytest.mark.unit
def test_the_extractive_former_remembers_the_caravan_for_those_present_only() -> None:
    scene, turns, cast = _scripted()
    present = [cast["aria"], cast["bram"], cast["brenna"]]
    formed = ExtractiveFormer().form(scene, turns, present, entities=list(cast.values()))

    assert formed.summary is not None and KEY in formed.summary
    assert "Missing caravan" in formed.summary  # the canon outcome follows the sentences
    assert formed.summary.startswith("The forge: ")
    for who in ("aria", "bram"):
        observer = cast[who].entity_id
        scene_memories = _memories(formed, observer, SubjectiveKind.MEMORY)
        assert len(scene_memories) == 1 and scene_memories[0].text.startswith(f"{cast[who].name} remembers")
        claims = _memories(formed, observer, SubjectiveKind.CLAIM)
        told = [c.text for c in claims]
        assert any(KEY in t and t.startswith(f"Brenna told {cast[who].name}") for t in told), told
        assert any("Old Mill crossing" in t for t in told), told  # quoted, attributed after the quote
        assert any("that wolves have been hunting" in t for t in told), told  # reported, "She" is Brenna
        assert not any("traders" in t for t in told)  # a question is not a claim
        caravan_claim = next(c for c in claims if KEY in c.text)
        assert caravan_claim.subject_entity_ids[:1] == [cast["brenna"].entity_id]
        assert cast["caravan"].entity_id in caravan_claim.subject_entity_ids
    # the speaker is not told her own words; the absent smith's neighbour hears nothing
    assert _memories(formed, cast["brenna"].entity_id, SubjectiveKind.CLAIM) == []
    assert len(_memories(formed, cast["brenna"].entity_id, SubjectiveKind.MEMORY)) == 1
    assert _memories(formed, cast["cole"].entity_id) == []
    assert {m.anchor_turn_id for m in formed.memories} == {turns[-1].id}
    assert {m.campaign_id for m in formed.memories} == {"camp_forge"}


@pytest.mark.unit
def test_the_extractive_former_is_deterministic_and_addresses_by_name() -> None:
    scene, turns, cast = _scripted()
    present = [cast["aria"], cast["bram"], cast["brenna"]]
    first = ExtractiveFormer().form(scene, turns, present, entities=list(cast.values()))
    again = ExtractiveFormer().form(scene, turns, present, entities=list(cast.values()))
    assert first.summary == again.summary
    assert [(m.observer_entity_id, m.kind, m.text) for m in first.memories] == [
        (m.observer_entity_id, m.kind, m.text) for m in again.memories
    ]

    # a line said to one character by name is that character's claim only
    aside = turns[-1].model_copy(
        update={"narration": "Brenna tells Bram that the wolves fear fire more than steel.", "id": "turn_aside"}
    )
    formed = ExtractiveFormer().form(
        scene.model_copy(update={"end_turn_id": aside.id}), [*turns, aside], present, entities=list(cast.values())
    )
    fire = [m for m in formed.memories if "fear fire" in m.text and m.kind is SubjectiveKind.CLAIM]
    assert [m.observer_entity_id for m in fire] == [cast["bram"].entity_id]
    assert fire[0].salience > 0.6  # said to them, by name


@pytest.mark.unit
def test_a_scene_without_words_or_an_end_forms_nothing() -> None:
    scene, turns, cast = _scripted()
    present = [cast["aria"]]
    assert ExtractiveFormer().form(scene, [], present).memories == []
    assert ExtractiveFormer().form(scene, [], present).summary is None
    assert ExtractiveFormer().form(scene.model_copy(update={"end_turn_id": None}), turns, present).memories == []


@pytest.mark.unit
def test_centrality_prefers_what_the_scene_is_about() -> None:
    texts = sentences("The caravan is lost. The caravan carried iron. I sneeze. The lost caravan had iron and silk.")
    assert len(texts) == 4
    scores = centrality(texts)
    assert scores[2] == min(scores)  # a sentence about nothing else in the scene
    assert scores[3] == max(scores)
    assert centrality(["", "a the of"]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="at least 1"):
        ExtractiveFormer(summary_sentences=0)


# -- at scene end, through the story service ---------------------------------------------------------


def _cast(story: StoryService, campaign_id: str) -> dict[str, str]:
    setup = story.start_scene(campaign_id, title="Cast")
    ids = {
        "aria": gm_entity(story, setup.id, "character", "Aria Vell"),
        "bram": gm_entity(story, setup.id, "character", "Bram"),
        "brenna": gm_entity(story, setup.id, "character", "Brenna"),
        "cole": gm_entity(story, setup.id, "character", "Cole"),
        "caravan": gm_entity(story, setup.id, "item", "Millbrook caravan"),
    }
    story.end_scene(setup.id)  # no turns in it: nothing forms
    return ids


def _play_forge(story: StoryService, campaign_id: str, ids: dict[str, str]) -> Scene:
    scene = story.start_scene(campaign_id, title="The forge", participant_entity_ids=[ids["aria"], ids["bram"]])
    for who, mode, text, narration in FORGE:
        story.add_turn(campaign_id, text, speaker=_speaker(who, ids), input_mode=mode, narration=narration)
    story.propose(
        scene.id,
        type="event",
        content={"title": "Missing caravan", "description": "the Millbrook caravan is missing"},
        authority="gm",
        confidence=1.0,
    )
    return scene


@pytest.mark.servers
def test_scene_end_forms_indexes_and_recalls_memories_per_observer(recalling_story: StoryService) -> None:
    story = recalling_story
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    ids = _cast(story, campaign.id)
    assert story.memories(campaign.id) == [] and story.summaries(campaign.id) == []
    scene = _play_forge(story, campaign.id, ids)
    with capture_logs() as logs:
        report = story.end_scene(scene.id)
    assert report.events_committed == 1
    ended = story.get_scene(scene.id)

    (summary,) = story.summaries(campaign.id)
    assert summary.scope is SummaryScope.SCENE and summary.scene_id == scene.id
    assert summary.anchor_turn_id == ended.end_turn_id and summary.from_turn_id == scene.start_turn_id
    assert KEY in summary.text
    for who in ("aria", "bram"):
        mine = story.memories(campaign.id, observer_entity_id=ids[who])
        assert {m.kind for m in mine} == {SubjectiveKind.MEMORY, SubjectiveKind.CLAIM}
        assert any("caravan" in m.text for m in mine)
        assert {m.anchor_turn_id for m in mine} == {ended.end_turn_id}
    assert story.memories(campaign.id, observer_entity_id=ids["cole"]) == []
    (formed,) = [e for e in logs if e["event"] == "memories_formed" and e["scene_id"] == scene.id]
    assert formed["summary"] == 1 and formed["memories"] == len(story.memories(campaign.id)) > 4

    # many turns later, recalled by meaning, as what Aria was told; Cole was not there
    for i in range(12):
        story.add_turn(campaign.id, f"We travel north, day {i}", narration=f"Day {i}: rain, mud and pines.")
    question = "what did the blacksmith tell us about the missing caravan?"
    hits = story.recall(campaign.id, question, observer_entity_id=ids["aria"], kinds=[RecallKind.MEMORY], limit=3)
    assert hits and "Millbrook caravan never arrived" in hits[0].text
    assert {h.id for h in hits} <= {m.id for m in story.memories(campaign.id, observer_entity_id=ids["aria"])}
    assert story.recall(campaign.id, question, observer_entity_id=ids["cole"], kinds=[RecallKind.MEMORY]) == []
    summaries = story.recall(campaign.id, "the caravan that never arrived", kinds=[RecallKind.SUMMARY], limit=1)
    assert summaries[0].id == summary.id


@pytest.mark.servers
def test_forming_is_idempotent(recalling_story: StoryService) -> None:
    story = recalling_story
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    scene = _play_forge(story, campaign.id, _cast(story, campaign.id))
    story.end_scene(scene.id)
    memories = {m.id for m in story.memories(campaign.id)}
    index = story.recall_index
    assert index is not None
    records = index.count(campaign.id)

    again = story.end_scene(scene.id)
    assert again.already_completed
    result = form_scene(story, story.get_scene(scene.id), ExtractiveFormer())  # forming again by hand
    assert (result.summary_added, result.memories_added, result.already_there) == (False, 0, len(memories))
    assert {m.id for m in story.memories(campaign.id)} == memories
    assert len(story.summaries(campaign.id)) == 1
    assert index.count(campaign.id) == records


@pytest.mark.servers
def test_the_gms_summary_is_the_scene_summary_and_memories_still_form(story: StoryService) -> None:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    ids = _cast(story, campaign.id)
    scene = _play_forge(story, campaign.id, ids)
    story.end_scene(scene.id, summary="Brenna asked us to find her iron.")
    assert [s.text for s in story.summaries(campaign.id)] == ["Brenna asked us to find her iron."]
    assert story.memories(campaign.id, observer_entity_id=ids["aria"])


class _Broken:
    name = "broken"

    def form(self, *args: Any, **kwargs: Any) -> FormedScene:
        raise RuntimeError("the former fell over")


@pytest.mark.servers
def test_a_failing_former_keeps_the_gates_canon(story: StoryService) -> None:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    ids = _cast(story, campaign.id)
    scene = _play_forge(story, campaign.id, ids)
    story.memory_former = _Broken()
    with capture_logs() as logs:
        report = story.end_scene(scene.id)
    assert report.events_committed == 1 and not report.already_completed
    assert story.get_scene(scene.id).status.value == "completed"
    assert any(h["title"] == "Missing caravan" for h in story.happenings(campaign.id))
    assert story.memories(campaign.id) == [] and story.summaries(campaign.id) == []
    (failed,) = [e for e in logs if e["event"] == "memory_formation_failed"]
    assert "fell over" in failed["error"] and failed["scene_id"] == scene.id


@pytest.mark.servers
def test_no_former_forms_nothing(story: StoryService) -> None:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    scene = _play_forge(story, campaign.id, _cast(story, campaign.id))
    story.memory_former = None
    story.end_scene(scene.id)
    assert story.memories(campaign.id) == [] and story.summaries(campaign.id) == []
