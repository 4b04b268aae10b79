"""The source bucket's settings and the copy from it into the product's layout, on local folder stores.

The copy is the one function both backends run (``jobs.sources.copy_from_source_bucket``); here it reads
from and writes to real local folder stores, so a failed write (the product's bucket gone) and the
declared type naming the copy are checked without a server. The S3 run with two servers is in
``test_ingest_source_bucket.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from jobs.sources import copy_from_source_bucket
from schemas.common import content_id, sha256_hex
from schemas.errors import ConfigError, InvalidRequest, NotFound
from schemas.knowledge import IngestJob, IngestSource
from schemas.settings import BlobBackend, Environment, load_settings
from stores.blob.local import LocalBlobStore
from stores.factory import open_source_blob_store

pytestmark = pytest.mark.unit

DATA = b"# Lanterns\n\nThe lantern guild lights the harbour every dusk.\n"


@pytest.fixture
def stores(tmp_path: Path) -> tuple[LocalBlobStore, LocalBlobStore]:
    source = LocalBlobStore(tmp_path / "source", default_bucket="library-source")
    product = LocalBlobStore(tmp_path / "product", default_bucket="lorekeeper")
    source.ensure_bucket()
    product.ensure_bucket()
    return source, product


def _job(key: str, **fields: object) -> IngestJob:
    return IngestJob(
        origin=IngestSource.SOURCE_BUCKET,
        source_ref=f"s3://library-source/{key}",
        s3_key=key,
        source_bucket="library-source",
        library_uid="lib_1",
        **fields,  # type: ignore[arg-type]
    )


def test_the_copy_lands_in_the_items_layout_named_by_the_declared_type(
    stores: tuple[LocalBlobStore, LocalBlobStore],
) -> None:
    source, product = stores
    source.put("inbox/7f3a", DATA)
    with capture_logs() as logs:
        job = copy_from_source_bucket(
            _job("inbox/7f3a", file_type="text/markdown", file_size=len(DATA)), source, product, max_bytes=1 << 20
        )
    item_uid = content_id("item", f"lib_1:{sha256_hex(DATA)}")
    assert (job.item_uid, job.raw_key) == (item_uid, f"items/{item_uid}/original/7f3a.md")
    assert product.get(job.raw_key) == DATA
    names = [e["event"] for e in logs]
    assert names == [
        "embed_s3_fetch_start",
        "embed_s3_fetch_complete",
        "s3_cross_bucket_copy_start",
        "s3_cross_bucket_copy_complete",
    ]
    assert logs[1]["file_size"] == len(DATA) and logs[3]["dest_bucket"] == "lorekeeper"
    # a second copy of the same job is the same key, not another one
    copy_from_source_bucket(_job("inbox/7f3a", file_type="text/markdown"), source, product, max_bytes=1 << 20)
    assert [i.key for i in product.list("items/")] == [job.raw_key]


def test_a_copy_that_cannot_be_written_fails_and_names_the_copy(
    stores: tuple[LocalBlobStore, LocalBlobStore], tmp_path: Path
) -> None:
    source, _ = stores
    source.put("inbox/lanterns.md", DATA)
    gone = LocalBlobStore(tmp_path / "product", default_bucket="no-such-bucket")
    with capture_logs() as logs, pytest.raises(NotFound):
        copy_from_source_bucket(_job("inbox/lanterns.md"), source, gone, max_bytes=1 << 20)
    failed = [e for e in logs if e["event"] == "s3_cross_bucket_copy_failed"]
    assert len(failed) == 1 and failed[0]["source_key"] == "inbox/lanterns.md" and failed[0]["error"]
    assert failed[0]["source_bucket"] == "library-source"


@pytest.mark.parametrize(
    ("key", "fields", "error", "problem"),
    [
        ("inbox/missing.md", {}, NotFound, "inbox/missing.md"),
        ("inbox/lanterns.md", {"file_size": 3}, InvalidRequest, "file_size says 3"),
        ("inbox/lanterns.md", {"file_type": "application/pdf"}, InvalidRequest, "file_type says pdf"),
    ],
)
def test_a_bad_object_fails_before_anything_is_written(
    stores: tuple[LocalBlobStore, LocalBlobStore],
    key: str,
    fields: dict[str, object],
    error: type[Exception],
    problem: str,
) -> None:
    source, product = stores
    source.put("inbox/lanterns.md", DATA)
    with pytest.raises(error, match=problem):
        copy_from_source_bucket(_job(key, **fields), source, product, max_bytes=1 << 20)
    with pytest.raises(InvalidRequest, match="over the limit"):
        copy_from_source_bucket(_job("inbox/lanterns.md"), source, product, max_bytes=10)
    assert list(product.list()) == []


def test_source_bucket_settings(tmp_path: Path) -> None:
    assert load_settings(data_dir=tmp_path).source_blob_location() is None
    secret = tmp_path / "source-secret"
    secret.write_text("s3cr3t-from-a-file\n")
    settings = load_settings(
        data_dir=tmp_path,
        source_blob_url="s3://library-source?endpoint=http://127.0.0.1:9100&region=eu-west-1",
        source_blob_access_key="reader",
        source_blob_secret_key_file=secret,
    )
    location = settings.source_blob_location()
    assert location is not None and location.backend is BlobBackend.S3
    assert (location.bucket, location.endpoint, location.secure, location.region) == (
        "library-source",
        "127.0.0.1:9100",
        False,
        "eu-west-1",
    )
    assert location.secret_key is not None and location.secret_key.get_secret_value() == "s3cr3t-from-a-file"
    assert settings.blob_location().backend is BlobBackend.LOCAL  # the product's bucket is its own
    store = open_source_blob_store(settings)
    assert store is not None and store.default_bucket == "library-source"
    store.close()
    local = load_settings(data_dir=tmp_path, source_blob_url=f"file://{tmp_path}/src")
    assert local.source_blob_location() == local.source_blob_location()
    assert local.source_blob_location().root == tmp_path / "src"  # type: ignore[union-attr]

    for bad, variable in (
        ({"source_blob_access_key": "reader", "source_blob_secret_key": "x"}, "LOREKEEPER_SOURCE_BLOB_ACCESS_KEY"),
        ({"source_blob_url": "s3://b?endpoint=http://h:1", "source_blob_access_key": "r"}, "_SECRET_KEY"),
        ({"source_blob_url": "s3://reader:pw@b?endpoint=http://h:1"}, "LOREKEEPER_SOURCE_BLOB_URL"),
        ({"source_blob_url": "ftp://b"}, "LOREKEEPER_SOURCE_BLOB_URL"),
        (
            {
                "environment": Environment.PRODUCTION,
                "source_blob_url": "s3://b?endpoint=http://h:1",
                "source_blob_access_key": "r",
                "source_blob_secret_key": "minioadmin",
            },
            "LOREKEEPER_SOURCE_BLOB_SECRET_KEY",
        ),
    ):
        with pytest.raises(ConfigError, match=variable):
            load_settings(data_dir=tmp_path, **bad)
