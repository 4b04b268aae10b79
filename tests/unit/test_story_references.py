"""What a request names must be there, and of the kind its role takes: a 400 naming the field, nothing written.

Speakers, a scene's location and participants, a memory's observer, subjects and anchor, a summary's scene
and turns (:mod:`story.references`); a GM's summary of a scene with no turns is refused, not dropped.
"""

from __future__ import annotations

import pickle

import pytest

from schemas.errors import InvalidRequest
from schemas.story import Memory, Speaker, SpeakerKind, Summary
from story.errors import InvalidReference
from story.service import StoryService
from tests.fixtures.story import FANTASY

pytestmark = pytest.mark.servers


def _world(story: StoryService) -> tuple[str, dict[str, str], list[str]]:
    """A campaign with a character, a creature, a building and a place (canon from turn a), and turns a, b, c."""
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "The Sunken Crown", FANTASY)
    turns = [story.add_turn(campaign.id, "a", narration="A.").id]
    scene = story.start_scene(campaign.id, title="Arrival")
    ids = {}
    for name, kind in (("ayla", "character"), ("wolf", "creature"), ("tower", "structure"), ("inn", "location")):
        proposal = story.propose(
            scene.id, type="entity", content={"kind": kind, "name": name}, authority="gm", confidence=1.0
        )
        ids[name] = f"ent_{proposal.id.split('_', 1)[1]}"
    story.end_scene(scene.id)
    turns += [story.add_turn(campaign.id, t, narration=t.upper()).id for t in ("b", "c")]
    return campaign.id, ids, turns


def _refused(field: str, call: object, *args: object, **kwargs: object) -> InvalidReference:
    with pytest.raises(InvalidReference) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    assert caught.value.field == field and caught.value.status_code == 400
    assert caught.value.client_message.startswith(f"story: {field}: ")
    return caught.value


def test_a_turn_is_spoken_by_a_being_that_is_there(story: StoryService) -> None:
    campaign_id, ids, _ = _world(story)
    before = story.history(campaign_id)
    ghost = Speaker(kind=SpeakerKind.ENTITY, entity_id="ent_nobody")
    assert "ent_nobody" in _refused("speaker.entity_id", story.add_turn, campaign_id, "boo", speaker=ghost).message
    tower = Speaker(kind=SpeakerKind.ENTITY, entity_id=ids["tower"])
    assert "structure" in _refused("speaker.entity_id", story.add_turn, campaign_id, "hm", speaker=tower).message
    as_player = Speaker(kind=SpeakerKind.PLAYER, entity_id=ids["inn"])  # a player's character is a being too
    _refused("speaker.entity_id", story.add_turn, campaign_id, "I am an inn", speaker=as_player)
    assert story.history(campaign_id) == before  # nothing written
    for who in ("ayla", "wolf"):
        turn = story.add_turn(campaign_id, "speaks", speaker=Speaker(kind=SpeakerKind.ENTITY, entity_id=ids[who]))
        assert turn.speaker.entity_id == ids[who]


def test_a_speaker_must_be_there_at_the_head(story: StoryService) -> None:
    campaign_id, ids, (a, _, _) = _world(story)
    story.create_branch(campaign_id, a)  # canon came at a's scene end: still there
    story.add_turn(campaign_id, "x", speaker=Speaker(kind=SpeakerKind.ENTITY, entity_id=ids["ayla"]))
    world = story.create_world("Elsewhere")
    other = story.create_campaign(world.id, "Other", FANTASY)
    story.add_turn(other.id, "first")
    ayla = Speaker(kind=SpeakerKind.ENTITY, entity_id=ids["ayla"])  # another campaign's character
    _refused("speaker.entity_id", story.add_turn, other.id, "hello", speaker=ayla)


def test_a_scene_takes_place_in_a_place(story: StoryService) -> None:
    campaign_id, ids, _ = _world(story)
    error = _refused("location_entity_id", story.start_scene, campaign_id, location_entity_id=ids["ayla"])
    assert "character" in error.message and "location" in error.message
    _refused("location_entity_id", story.start_scene, campaign_id, location_entity_id="ent_nowhere")
    _refused(
        "participant_entity_ids[1]",
        story.start_scene,
        campaign_id,
        location_entity_id=ids["inn"],
        participant_entity_ids=[ids["ayla"], "ent_nobody"],
    )
    assert story.active_scene(campaign_id) is None  # nothing opened
    for place in ("inn", "tower"):
        scene = story.start_scene(campaign_id, location_entity_id=ids[place], participant_entity_ids=[ids["ayla"]])
        story.end_scene(scene.id)


def test_a_memory_is_a_beings_at_a_real_turn_of_the_campaign(story: StoryService) -> None:
    campaign_id, ids, (a, b, _) = _world(story)

    def memory(**fields: object) -> Memory:
        return Memory(**{"campaign_id": campaign_id, "observer_entity_id": ids["ayla"], "text": "x", **fields})  # type: ignore[arg-type]

    _refused("observer_entity_id", story.add_memory, memory(observer_entity_id=ids["tower"], anchor_turn_id=b))
    _refused("observer_entity_id", story.add_memory, memory(observer_entity_id="ent_nobody", anchor_turn_id=b))
    _refused("subject_entity_ids[0]", story.add_memory, memory(anchor_turn_id=b, subject_entity_ids=["ent_nobody"]))
    _refused("anchor_turn_id", story.add_memory, memory(anchor_turn_id="turn_0"))
    world = story.create_world("Elsewhere")
    other = story.create_campaign(world.id, "Other", FANTASY)
    elsewhere = story.add_turn(other.id, "first").id
    _refused("anchor_turn_id", story.add_memory, memory(anchor_turn_id=elsewhere))
    assert story.memories(campaign_id) == []
    kept = story.add_memory(memory(anchor_turn_id=b, subject_entity_ids=[ids["wolf"]]))
    story.add_memory(memory(observer_entity_id=ids["wolf"], anchor_turn_id=b))  # a creature remembers too
    assert kept in story.memories(campaign_id)


def test_a_memory_is_not_backdated_before_its_observer(story: StoryService) -> None:
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "Late arrival", FANTASY)
    first = story.add_turn(campaign.id, "first", narration="The road.").id
    story.add_turn(campaign.id, "second", narration="A stranger.")
    scene = story.start_scene(campaign.id)
    proposal = story.propose(
        scene.id, type="entity", content={"kind": "character", "name": "Vel"}, authority="gm", confidence=1.0
    )
    story.end_scene(scene.id)
    vel = f"ent_{proposal.id.split('_', 1)[1]}"
    error = _refused(
        "observer_entity_id",
        story.add_memory,
        Memory(campaign_id=campaign.id, observer_entity_id=vel, text="I was there first", anchor_turn_id=first),
    )
    assert "at this point" in error.message


def test_a_memory_is_anchored_where_its_observer_is(story: StoryService) -> None:
    """A character that came in on a branch forked at the first turn is not there at that turn itself: a memory
    anchored there (seen from the first turn's own line, where it would be listed) is refused."""
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "Two roads", FANTASY)
    first = story.add_turn(campaign.id, "first", narration="The road forks.").id
    main = story.get_campaign(campaign.id).active_branch_id
    story.add_turn(campaign.id, "left", narration="Left.")
    story.create_branch(campaign.id, first)  # the head is the first turn, on the new branch
    scene = story.start_scene(campaign.id)
    proposal = story.propose(
        scene.id, type="entity", content={"kind": "character", "name": "Vel"}, authority="gm", confidence=1.0
    )
    story.end_scene(scene.id)
    vel = f"ent_{proposal.id.split('_', 1)[1]}"
    assert vel in {e.id for e in story.state(campaign.id).entities}  # at the head, on the new branch
    _refused(
        "observer_entity_id",
        story.add_memory,
        Memory(campaign_id=campaign.id, observer_entity_id=vel, text="I came by the right road", anchor_turn_id=first),
    )
    assert story.memories(campaign.id, turn_id=first) == []
    story.switch_branch(campaign.id, main)
    assert story.memories(campaign.id) == []


def test_a_summary_names_real_turns_and_scenes(story: StoryService) -> None:
    campaign_id, _, (a, b, c) = _world(story)

    def summary(**fields: object) -> Summary:
        return Summary(**{"campaign_id": campaign_id, "scope": "session", "text": "x", **fields})  # type: ignore[arg-type]

    _refused("anchor_turn_id", story.add_summary, summary(anchor_turn_id="turn_nope"))
    _refused("from_turn_id", story.add_summary, summary(anchor_turn_id=b, from_turn_id="turn_nope"))
    _refused("from_turn_id", story.add_summary, summary(anchor_turn_id=a, from_turn_id=c))
    _refused("scene_id", story.add_summary, summary(scope="scene", scene_id="scene_nope", anchor_turn_id=c))
    assert story.summaries(campaign_id) == []
    story.add_summary(summary(anchor_turn_id=c, from_turn_id=a))


def test_a_gms_summary_of_a_scene_with_no_turns_is_refused_not_dropped(story: StoryService) -> None:
    campaign_id, _, _ = _world(story)
    scene = story.start_scene(campaign_id, title="Empty")
    _refused("summary", story.end_scene, scene.id, summary="Nothing happened, at length.")
    assert story.active_scene(campaign_id) is not None  # not ended: nothing lost
    story.add_turn(campaign_id, "now something happens", narration="It does.")
    story.end_scene(scene.id, summary="Something happened.")
    assert story.get_scene(scene.id).summary == "Something happened."


def test_an_invalid_reference_is_a_400_that_survives_pickling() -> None:
    error = InvalidReference("speaker.entity_id", "no entity 'ent_x' here")
    assert isinstance(error, InvalidRequest) and error.to_dict()["error"] == "invalid_request"
    copy = pickle.loads(pickle.dumps(error))  # Ray ships errors between processes
    assert type(copy) is InvalidReference and copy.field == "speaker.entity_id"
    assert copy.to_dict() == error.to_dict()
