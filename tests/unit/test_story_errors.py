"""The story's own errors: the statuses and codes of the store errors they refine, ``story: …`` for a client."""

from __future__ import annotations

import pickle

import pytest

from schemas.errors import Conflict, InvalidRequest, NotFound
from story.errors import StoryConflict, StoryInvalid, StoryNotFound

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("error", "parent", "status", "code"),
    [
        (StoryNotFound("no campaign 'camp_x'"), NotFound, 404, "not_found"),
        (StoryConflict("campaign 'camp_x' is too busy"), Conflict, 409, "conflict"),
        (StoryInvalid("nothing to undo"), InvalidRequest, 400, "invalid_request"),
    ],
)
def test_story_errors_are_the_store_errors_they_refine(
    error: StoryNotFound, parent: type[Exception], status: int, code: str
) -> None:
    assert isinstance(error, parent)
    assert error.status_code == status and error.code == code
    assert error.store == "story" and error.client_message == f"story: {error.detail}"
    assert error.to_dict() == {"error": code, "message": f"story: {error.detail}"}
    copy = pickle.loads(pickle.dumps(error))  # Ray ships errors between processes
    assert type(copy) is type(error) and copy.to_dict() == error.to_dict() and copy.store == "story"
