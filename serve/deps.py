"""What a route depends on: the services of this ingress, and the caller behind the request's key.

What a caller may do is each operation's rule (:mod:`serve.operations.access`), not a route's."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from serve.auth import Principal
from serve.services import Services

API = "/api/v1"


def _services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated[Services, Depends(_services)]


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def principal(request: Request, services: ServicesDep) -> Principal:
    """The caller; open (admin) only on a loopback API with no keys."""
    return await services.authenticate(bearer(request))


PrincipalDep = Annotated[Principal, Depends(principal)]


async def admin(caller: PrincipalDep) -> Principal:
    caller.require_admin()
    return caller


AdminDep = Annotated[Principal, Depends(admin)]
