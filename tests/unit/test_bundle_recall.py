"""A campaign imported from its bundle into another store is recalled at once, with no offline reindex.

Before, the import wrote the graph only: recall answered nothing until ``lorekeeper reindex`` (which, on the
embedded stores, needs the server stopped).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


def test_an_imported_campaign_is_recalled_without_a_reindex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas.campaign import StoryProfile
    from schemas.settings import get_settings

    bundle = tmp_path / "campaign.zip"
    with api_services() as services:
        story = services.story
        world = story.create_world("Ashfall")
        campaign = story.create_campaign(world.id, "The Ember Road", StoryProfile(genre="fantasy"))
        story.add_turn(campaign.id, "I trade my lantern for a map of the salt caves.", narration="The map is old.")
        story.add_turn(campaign.id, "We camp by the frozen waterfall.", narration="The night is long.")
        before = [hit.text for hit in story.recall(campaign.id, "lantern traded for a map", limit=3)]
        story.export_campaign(campaign.id, bundle)
    assert any("lantern" in text for text in before)

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(tmp_path / "another-store"))
    get_settings.cache_clear()
    with api_services() as services:
        imported = services.story.import_campaign(bundle.read_bytes())
        after = [hit.text for hit in services.story.recall(imported.id, "lantern traded for a map", limit=3)]
    assert after == before
