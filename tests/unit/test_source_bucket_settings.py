"""An empty LOREKEEPER_SOURCE_BLOB_URL (a compose ``${VAR:-}`` left blank, an ``.env`` line without a value)
means no source bucket, as an unset one does; it was taken for a local folder under the data folder, so an
``s3_key`` was looked up there instead of in the product's own bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.settings import load_settings
from stores.factory import open_source_blob_store

pytestmark = pytest.mark.unit


def test_an_empty_source_url_is_no_source_bucket(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, source_blob_url="")
    assert settings.source_blob_location() is None
    assert open_source_blob_store(settings) is None


def test_credentials_without_a_source_url_are_still_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="LOREKEEPER_SOURCE_BLOB_URL is not"):
        load_settings(data_dir=tmp_path, source_blob_url="", source_blob_access_key="a", source_blob_secret_key="b")


def test_a_folder_source_is_still_a_local_source(tmp_path: Path) -> None:
    location = load_settings(data_dir=tmp_path, source_blob_url=f"file://{tmp_path}/library").source_blob_location()
    assert location is not None and location.root == tmp_path / "library"
