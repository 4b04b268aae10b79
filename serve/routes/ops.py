"""Operations: ``/health`` (every part the server stands on, and whether the API runs open) and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from serve.deps import ServicesDep


def router() -> APIRouter:
    r = APIRouter(tags=["ops"])

    @r.get("/health")
    async def health(s: ServicesDep) -> Response:
        """Each part's status and probe latency (``LOREKEEPER_HEALTH_TIMEOUT_S`` at most each); 503 when any is down."""
        found = await s.health()
        warming = s.warming.names()  # live while warming; ready once nothing is (serve.warming)
        body = {**found.model_dump(mode="json"), "warming": warming, "ready": found.status == "ok" and not warming}
        return JSONResponse(body, status_code=200 if found.status == "ok" else 503)

    @r.get("/metrics")
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return r
