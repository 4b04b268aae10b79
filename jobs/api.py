"""The ingest API: submit files (a path under an allowed root, an object-store key, or an upload),
follow and retry their jobs. A FastAPI router; ``create_app`` serves it alone, and the serving layer
mounts the same router behind its own ingress.
"""

from __future__ import annotations

import contextlib
import json as json_module
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile

from jobs.runner import RUNNER_QUEUE, IngestRunner
from jobs.sources import resolve_within
from schemas.common import JobStatus
from schemas.errors import InvalidRequest, LorekeeperError, NotFound, Unavailable
from schemas.ingest import IngestJobView, IngestRequest, declared_file_type, name_for
from schemas.knowledge import Collection, FileType, IngestJob, IngestSource, Item, Library, LibraryType
from schemas.rulefacts import StoredSourceFact
from schemas.settings import Settings, get_settings
from schemas.text import Name, RecordId, Text
from stores.blob.layout import sanitize_filename, upload_key, validate_key
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store, open_source_blob_store
from stores.source_facts import SourceFactStore

log = structlog.get_logger(__name__)


class LibraryCreate(BaseModel):
    name: Name
    type: LibraryType = LibraryType.RULEBOOK
    description: Text | None = None


class IngestContext:
    """What the routes need, built once per app: settings, the catalog, the blob stores, the runner."""

    def __init__(self, settings: Settings, *, allowed_roots: list[Path], max_upload_bytes: int) -> None:
        self.settings = settings
        self.graph = open_graph_store(settings)
        self.catalog = Catalog(self.graph)
        self.blob = open_blob_store(settings)
        self.source_blob = open_source_blob_store(settings)  # None unless LOREKEEPER_SOURCE_BLOB_URL is set
        self.allowed_roots = [root.resolve() for root in allowed_roots]
        self.runner = IngestRunner(settings, self.catalog, allowed_roots=self.allowed_roots)
        self.max_upload_bytes = max_upload_bytes

    def close(self) -> None:
        self.runner.stop()
        self.graph.close()
        self.blob.close()
        if self.source_blob is not None:
            self.source_blob.close()


def _context(request: Request) -> IngestContext:
    return request.app.state.ingest


ContextDep = Annotated[IngestContext, Depends(_context)]

router = APIRouter(prefix="/api/v1/library", tags=["library"])


def _resolve_path(ctx: IngestContext, raw: str) -> Path:
    path = resolve_within(raw, ctx.allowed_roots)
    if path is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"{raw} is outside the allowed ingest roots")
    if not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no such file: {raw}")
    return path


def _inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` put in place, to stand alone inside the OpenAPI document."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        return [inline(value) for value in node] if isinstance(node, list) else node

    return dict(inline(schema))


@router.post(
    "/ingest",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestJobView,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "JSON (IngestRequest: s3_key or path, title, library_uid, collection_uid, file_type, "
            "file_size, source, source_ref, classification) or a multipart form with the same fields and a file.",
            "content": {"application/json": {"schema": _inline_schema(IngestRequest)}, "multipart/form-data": {}},
        }
    },
)
async def ingest(request: Request, ctx: ContextDep) -> IngestJobView:
    """Accept one file for ingestion and answer its job at once (202); the work runs in the background.

    The content type decides the way in: a JSON body (the contract's: an object of the source bucket, or a
    path under an allowed root), or a multipart form that may carry the file itself.
    """
    upload: UploadFile | None = None
    if request.headers.get("content-type", "").split(";", 1)[0].strip() == "application/json":
        raw = await request.body()
        body = _validated(raw, json=True)
    else:
        form = await request.form(max_files=1)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        file = form.get("file")
        upload = file if file is not None and not isinstance(file, str) else None
        body = _validated(fields, json=False)
    job = await _job_of(ctx, body, upload)
    try:
        ctx.runner.submit(job)
    except Exception as exc:
        log.error(
            "ingest_task_dispatch_failed",
            job_id=job.id,
            item_uid=job.item_uid,
            exception=f"{type(exc).__name__}: {exc}",
        )
        if job.origin is IngestSource.UPLOAD and job.s3_key:
            with contextlib.suppress(LorekeeperError):
                ctx.blob.delete(job.s3_key)  # the upload's only reader is the job that was not recorded
        raise
    log.info("ingest_task_dispatched", job_id=job.id, item_uid=job.item_uid, task_id=job.id, queue=RUNNER_QUEUE)
    return IngestJobView.of(job)


def _validated(data: bytes | dict[str, str], *, json: bool) -> IngestRequest:
    """The request body as :class:`IngestRequest`; 422 naming each bad field (as FastAPI's own bodies).

    JSON is decoded by Python's reader, as FastAPI decodes its bodies: pydantic's own refuses a lone
    surrogate as invalid JSON without naming the field, where the field's rule names it.
    """
    if json:
        assert isinstance(data, bytes)
        try:
            data = json_module.loads(data)
        except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
            raise RequestValidationError([{"loc": ("body",), "msg": f"invalid JSON ({exc})"}]) from None
    try:
        return IngestRequest.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors(include_input=False)]
        ) from None


async def _job_of(ctx: IngestContext, body: IngestRequest, upload: UploadFile | None) -> IngestJob:
    """The job a request asks for, checked against the catalog and the buckets (nothing is written yet,
    except an upload's bytes)."""
    log.info(
        "ingest_request_received",
        s3_key=body.s3_key,
        title=body.title,
        library_uid=body.library_uid,
        collection_uid=body.collection_uid,
        file_type=body.file_type,
        file_size=body.file_size,
        source=body.source,
        source_ref=body.source_ref,
        way="upload" if upload is not None else "path" if body.path else "s3_key",
    )
    given = [x for x in (body.path, body.s3_key, upload) if x is not None]
    if len(given) != 1:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "give exactly one of path, s3_key or file")
    library = _library(ctx, body.library_uid)
    if body.collection_uid and body.collection_uid not in {c.uid for c in ctx.catalog.list_collections(library.uid)}:
        raise NotFound("graph", f"no collection {body.collection_uid!r} in library {body.library_uid!r}")
    common: dict[str, Any] = {
        "library_uid": library.uid,
        "collection_uid": body.collection_uid,
        "title": body.title,
        "file_type": body.file_type,
        "file_size": body.file_size,
        "source": body.source,
        "classification": body.classification,
    }
    if body.path is not None:
        # a path job's reference is its path (the runner reads it from there); a caller's source_ref is not kept
        return IngestJob(origin=IngestSource.PATH, source_ref=str(_resolve_path(ctx, body.path)), **common)
    if body.s3_key is not None:
        return _object_job(ctx, body, common)
    assert upload is not None
    name = _name(upload.filename or body.title or "upload", body.file_type)
    data = await upload.read(ctx.max_upload_bytes + 1)
    if len(data) > ctx.max_upload_bytes:
        raise HTTPException(
            status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, f"uploads are limited to {ctx.max_upload_bytes} bytes"
        )
    if body.file_size is not None and body.file_size != len(data):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"file_size {body.file_size} != {len(data)} bytes received"
        )
    job = IngestJob(origin=IngestSource.UPLOAD, source_ref=body.source_ref or name, s3_key="pending", **common)
    key = upload_key(job.id, name)
    ctx.blob.put(key, data)
    return job.validated_copy(s3_key=key)


def _library(ctx: IngestContext, library_uid: str) -> Library:
    try:
        library = ctx.catalog.get_library(library_uid)
    except NotFound:
        log.debug("ingest_library_lookup", library_uid=library_uid, found=False, library_type=None)
        raise
    log.debug("ingest_library_lookup", library_uid=library_uid, found=True, library_type=library.type.value)
    return library


def _name(name: str, file_type: str | None) -> str:
    """A file name the pipeline reads (the declared type's suffix added to a name without one); 422 when
    the name and the declared type disagree, or neither names a format the pipeline reads."""
    try:
        name = name_for(sanitize_filename(name), declared_file_type(file_type))
        FileType.from_filename(name)
    except ValueError as exc:
        raise InvalidRequest("ingest", str(exc)) from None
    return name


def _object_job(ctx: IngestContext, body: IngestRequest, common: dict[str, Any]) -> IngestJob:
    """The job of an ``s3_key``: an object of the source bucket when one is set, else of the product's.

    A key that is not there (404) or whose size disagrees with ``file_size`` (422) is refused here; a check
    that cannot be made (the bucket refused or did not answer) lets the job run and fail with the reason,
    so that fixing the bucket and retrying the job is enough.
    """
    key = validate_key(body.s3_key or "")  # a key no bucket can hold is the caller's mistake: 400 here
    store = ctx.source_blob or ctx.blob
    bucket = store.default_bucket
    name = _name(key, body.file_type)
    if ctx.source_blob is None and name != key.rsplit("/", 1)[-1]:
        raise InvalidRequest("ingest", f"{key!r} has no file suffix; an object of the product's bucket needs one")
    exists: bool | None = None
    size: int | None = None
    try:
        size, exists = store.stat(key).size, True
    except NotFound:
        exists = False
    except (InvalidRequest, Unavailable) as exc:
        log.warning("ingest_s3_key_unchecked", s3_key=key, bucket=bucket, error=str(exc))
    log.debug("ingest_s3_key_check", s3_key=key, exists=exists, bucket=bucket)
    if exists is False:
        raise NotFound("blob", f"no object {key!r} in bucket {bucket!r}")
    if size is not None and body.file_size is not None and size != body.file_size:
        raise InvalidRequest("ingest", f"{bucket}/{key} is {size} bytes but file_size says {body.file_size}")
    if size is not None and body.file_size is None:
        common = {**common, "file_size": size}  # what the door saw sizes the job (where its stages run)
    if ctx.source_blob is not None:
        ref = body.source_ref or f"s3://{bucket}/{key}"
        return IngestJob(origin=IngestSource.SOURCE_BUCKET, source_ref=ref, s3_key=key, source_bucket=bucket, **common)
    ref = body.source_ref or f"s3://{bucket}/{key}"
    return IngestJob(origin=IngestSource.S3, source_ref=ref, s3_key=key, **common)


@router.get("/jobs/{job_id}", response_model=IngestJobView)
def get_job(ctx: ContextDep, job_id: RecordId) -> IngestJobView:
    return IngestJobView.of(ctx.catalog.get_job(job_id))


@router.post("/jobs/{job_id}/retry", status_code=status.HTTP_202_ACCEPTED, response_model=IngestJobView)
def retry_job(ctx: ContextDep, job_id: RecordId) -> IngestJobView:
    return IngestJobView.of(ctx.runner.retry(job_id))


@router.get("/jobs", response_model=list[IngestJobView])
def list_jobs(
    ctx: ContextDep,
    status_filter: Annotated[JobStatus | None, Query(alias="status")] = None,
    source: Annotated[str | None, Query(max_length=2000, description="Only the jobs of this calling system.")] = None,
    source_ref: Annotated[str | None, Query(max_length=2000, description="Only the jobs of this file id.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[IngestJobView]:
    """Jobs, newest first."""
    jobs = ctx.catalog.list_jobs(status=status_filter, source=source, source_ref=source_ref, limit=limit)
    return [IngestJobView.of(job) for job in jobs]


@router.get("/libraries", response_model=list[Library])
def list_libraries(ctx: ContextDep) -> list[Library]:
    return ctx.catalog.list_libraries()


@router.post("/libraries", status_code=status.HTTP_201_CREATED, response_model=Library)
def create_library(ctx: ContextDep, body: LibraryCreate) -> Library:
    if not body.name.strip():
        raise InvalidRequest("library", "a library name must not be blank (it was only whitespace)")
    existing = ctx.catalog.find_library(body.name)
    if existing is not None:
        return existing
    return ctx.catalog.save_library(Library(name=body.name, type=body.type, description=body.description))


@router.get("/libraries/{uid}/collections", response_model=list[Collection])
def list_collections(ctx: ContextDep, uid: str) -> list[Collection]:
    ctx.catalog.get_library(uid)
    return ctx.catalog.list_collections(uid)


@router.get("/items/{uid}", response_model=Item)
def get_item(ctx: ContextDep, uid: str) -> Item:
    return ctx.catalog.get_item(uid)


@router.get("/items/{uid}/facts", response_model=list[StoredSourceFact])
def get_item_facts(
    ctx: ContextDep,
    uid: str,
    entry: Annotated[str | None, Query(max_length=200, description="An entry's name: only its facts.")] = None,
) -> list[StoredSourceFact]:
    """The rulebook facts an item states (once it is ready), with the chunk and page of each."""
    ctx.catalog.get_item(uid)  # 404 for an unknown item, not an empty list
    return SourceFactStore(ctx.graph).for_item(uid, entry=entry)


@router.get("/concepts")
def list_concepts(ctx: ContextDep, library_uid: str | None = None, limit: int = 100) -> list[dict[str, object]]:
    return ctx.catalog.list_concepts(library_uid=library_uid, limit=min(max(limit, 1), 1000))


def lorekeeper_error_handler(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, LorekeeperError)
    return JSONResponse(exc.to_dict(), status_code=exc.status_code)


def validation_error_handler(_: Request, exc: Exception) -> Response:
    """422 with each problem's place and message, never the input: FastAPI's own answer echoes the input,
    and one holding a lone surrogate cannot be encoded, which turned a refused request into a 500."""
    assert isinstance(exc, RequestValidationError)
    problems = [
        {"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")} for e in exc.errors()
    ]
    first = problems[0] if problems else {"where": "body", "problem": "invalid"}
    message = f"{first['where']}: {first['problem']}"
    return JSONResponse({"error": "validation_failed", "message": message, "problems": problems[:20]}, status_code=422)


@asynccontextmanager
async def ingest_context(
    app: FastAPI,
    settings: Settings,
    *,
    allowed_roots: list[Path] | None = None,
    max_upload_bytes: int = 512 * 1024 * 1024,
    start_runner: bool = True,
) -> AsyncIterator[IngestContext]:
    """Open what the routes need on ``app.state.ingest`` (and the job runner), and close it after."""
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

    ctx = IngestContext(settings, allowed_roots=allowed_roots or [Path.cwd()], max_upload_bytes=max_upload_bytes)
    ctx.graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    ctx.blob.ensure_bucket()
    app.state.ingest = ctx
    if start_runner:
        # No Ray here: a small job runs in this process, a larger one starts local Ray for its run (inside
        # Ray Serve it uses the replica's), so the server listens without waiting for Ray to start.
        ctx.runner.start()
    try:
        yield ctx
    finally:
        ctx.close()


def mount(app: FastAPI, admin: Any, settings: Settings, *, start_runner: bool = True) -> Callable[[FastAPI], Any]:
    """Add the ingest routes to another app (the serving ingress), behind its ``admin`` dependency, on
    the stores of ``settings`` (the host's own).

    Returns the lifespan that opens and closes the ingest context; the host app enters it.
    """
    app.include_router(router, dependencies=[admin] if admin is not None else [])
    allowed = settings.ingest_root_paths()

    def lifespan(host: FastAPI) -> Any:
        return ingest_context(host, settings, allowed_roots=allowed, start_runner=start_runner)

    return lifespan


def create_app(
    settings: Settings | None = None,
    *,
    allowed_roots: list[Path] | None = None,
    max_upload_bytes: int = 512 * 1024 * 1024,
    start_runner: bool = True,
) -> FastAPI:
    """A FastAPI app serving the ingest API alone (``uvicorn jobs.api:create_app --factory``).

    An entry point: without ``settings`` it reads them from the environment (``LOREKEEPER_*``).
    """
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with ingest_context(
            app, settings, allowed_roots=allowed_roots, max_upload_bytes=max_upload_bytes, start_runner=start_runner
        ):
            yield

    app = FastAPI(title="Lorekeeper ingest", lifespan=lifespan)
    app.include_router(router)
    app.add_exception_handler(LorekeeperError, lorekeeper_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app


__all__ = ["create_app", "ingest_context", "mount", "router"]
