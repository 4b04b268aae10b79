"""Operations: ``/health`` (each dependency, and whether the API runs open) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from schemas.errors import LorekeeperError
from serve.deps import ServicesDep


def router() -> APIRouter:
    r = APIRouter(tags=["ops"])

    @r.get("/health")
    async def health(s: ServicesDep) -> Response:
        checks = await s.health()
        healthy = all(v == "ok" for v in checks.values())
        try:
            is_open = await s.is_open()
        except LorekeeperError:
            is_open = False  # the graph is down (the checks say so): report closed, never open
        warming = s.warming.names()  # live while warming; ready once nothing is (serve.warming)
        body = {"status": "ok" if healthy else "degraded", "checks": checks, "open": is_open}
        body |= {"warming": warming, "ready": healthy and not warming}
        return JSONResponse(body, status_code=200 if healthy else 503)

    @r.get("/metrics")
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return r
