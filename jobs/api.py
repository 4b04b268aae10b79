"""The ingest API: submit files (a path under an allowed root, an object-store key, or an upload),
follow and retry their jobs. A FastAPI router; ``create_app`` serves it alone, and the serving layer
mounts the same router behind its own ingress.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Query, Request, UploadFile, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from jobs.runner import IngestRunner
from jobs.sources import resolve_within
from schemas.common import JobStatus
from schemas.errors import InvalidRequest, LorekeeperError, NotFound
from schemas.knowledge import Classification, Collection, FileType, IngestJob, IngestSource, Item, Library, LibraryType
from schemas.rulefacts import StoredSourceFact
from schemas.settings import Settings, get_settings
from schemas.text import Name, Note, Text, TextRule
from stores.blob.layout import sanitize_filename, upload_key
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store
from stores.source_facts import SourceFactStore

log = structlog.get_logger(__name__)

Path_ = Annotated[str, TextRule(4096)]
"""A path as a client sends it: at most 4,096 characters, no NUL (refused with 422, not a crash in the resolver)."""


class IngestAccepted(BaseModel):
    job_id: str
    status: JobStatus


class LibraryCreate(BaseModel):
    name: Name
    type: LibraryType = LibraryType.RULEBOOK
    description: Text | None = None


class IngestContext:
    """What the routes need, built once per app: settings, the catalog, the blob store, the runner."""

    def __init__(self, settings: Settings, *, allowed_roots: list[Path], max_upload_bytes: int) -> None:
        self.settings = settings
        self.graph = open_graph_store(settings)
        self.catalog = Catalog(self.graph)
        self.blob = open_blob_store(settings)
        self.allowed_roots = [root.resolve() for root in allowed_roots]
        self.runner = IngestRunner(settings, self.catalog, allowed_roots=self.allowed_roots)
        self.max_upload_bytes = max_upload_bytes

    def close(self) -> None:
        self.runner.stop()
        self.graph.close()
        self.blob.close()


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


@router.post("/ingest", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted)
async def ingest(
    ctx: ContextDep,
    library_uid: Annotated[str, Form(description="Library to ingest into.")],
    path: Annotated[Path_ | None, Form(description="A file under an allowed root.")] = None,
    s3_key: Annotated[str | None, Form(description="An object already in the blob store.")] = None,
    file: Annotated[UploadFile | None, File(description="The file itself.")] = None,
    collection_uid: Annotated[str | None, Form()] = None,
    title: Annotated[Name | None, Form()] = None,
    file_type: Annotated[FileType | None, Form()] = None,
    file_size: Annotated[int | None, Form(ge=0)] = None,
    classification: Annotated[Classification, Form()] = Classification.CANON,
    source: Annotated[Note | None, Form(description="Free text: where the file came from.")] = None,
    source_ref: Annotated[
        Note | None, Form(description="Stable reference; re-ingest replaces its old version.")
    ] = None,
) -> IngestAccepted:
    """Accept one file for ingestion and return its job id at once (202); the work runs in the background."""
    given = [x for x in (path, s3_key, file) if x is not None]
    if len(given) != 1:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "give exactly one of path, s3_key or file")
    library = ctx.catalog.get_library(library_uid)
    if collection_uid and collection_uid not in {c.uid for c in ctx.catalog.list_collections(library.uid)}:
        raise NotFound("graph", f"no collection {collection_uid!r} in library {library_uid!r}")
    log.info("ingest_request_received", library_uid=library_uid, kind="path" if path else "s3" if s3_key else "upload")
    if path is not None:
        resolved = _resolve_path(ctx, path)
        job = IngestJob(
            source=IngestSource.PATH, source_ref=str(resolved), library_uid=library.uid, collection_uid=collection_uid
        )
    elif s3_key is not None:
        if not ctx.blob.exists(s3_key):
            raise NotFound("blob", f"no object {s3_key!r} in the blob store")
        job = IngestJob(
            source=IngestSource.S3,
            source_ref=source_ref or f"s3://{ctx.blob.default_bucket}/{s3_key}",
            s3_key=s3_key,
            library_uid=library.uid,
            collection_uid=collection_uid,
        )
    else:
        assert file is not None
        name = sanitize_filename(file.filename or title or "upload")
        data = await file.read(ctx.max_upload_bytes + 1)
        if len(data) > ctx.max_upload_bytes:
            raise HTTPException(
                status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, f"uploads are limited to {ctx.max_upload_bytes} bytes"
            )
        if file_size is not None and file_size != len(data):
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY, f"file_size {file_size} != {len(data)} bytes received"
            )
        job = IngestJob(
            source=IngestSource.UPLOAD,
            source_ref=source_ref or name,
            s3_key="pending",
            library_uid=library.uid,
            collection_uid=collection_uid,
        )
        key = upload_key(job.id, name)
        ctx.blob.put(key, data)
        job = job.validated_copy(s3_key=key)
    ctx.runner.submit(job)
    return IngestAccepted(job_id=job.id, status=job.status)


@router.get("/jobs/{job_id}", response_model=IngestJob)
def get_job(ctx: ContextDep, job_id: str) -> IngestJob:
    return ctx.catalog.get_job(job_id)


@router.post("/jobs/{job_id}/retry", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted)
def retry_job(ctx: ContextDep, job_id: str) -> IngestAccepted:
    job = ctx.runner.retry(job_id)
    return IngestAccepted(job_id=job.id, status=job.status)


@router.get("/jobs", response_model=list[IngestJob])
def list_jobs(
    ctx: ContextDep,
    status_filter: Annotated[JobStatus | None, Query(alias="status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[IngestJob]:
    return ctx.catalog.list_jobs(status=status_filter, limit=limit)


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
