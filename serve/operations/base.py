"""What an operation is: one typed, transport-free use case with its access rule declared as data.

An :class:`Operation` names its handler, its input (the ids it acts on and one request model), its
output, and an :class:`Access` rule: *who* may call it (:class:`Role`) and *on what* (:class:`On`).
The REST routes (:mod:`serve.routes.operations`) and the MCP tools (:mod:`serve.mcp`) are generated
from the table of operations (:data:`serve.operations.OPERATIONS`), and both call :func:`invoke`,
which enforces the rule (:mod:`serve.operations.access`) once for both doors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from serve.auth import Principal
from serve.services import Services

B = TypeVar("B", bound=BaseModel)


class Role(StrEnum):
    """Who may call an operation, from the least to the most trusted."""

    OPEN = "open"  # no key needed (a health probe)
    ANY = "any key"  # any valid key: the shared knowledge
    PLAYER = "player"  # a key of the target campaign (player or GM), or an admin key
    GM = "gm"  # the target campaign's GM key, or an admin key
    ADMIN = "admin"  # an admin key


class On(StrEnum):
    """What an operation acts on: the record its access rule is checked against."""

    NOTHING = "nothing"  # no campaign: knowledge, library, keys as a whole
    WORLD = "world"  # ``world_id``: a campaign key reaches the worlds of its campaigns
    CAMPAIGN = "campaign"  # ``campaign_id`` (a path id, else a field of the body)
    TURN = "turn"  # ``turn_id`` of the campaign ``campaign_id``
    SCENE = "scene"  # ``scene_id``, reached through its campaign


class Empty(BaseModel):
    """The request model of an operation that takes nothing but its ids."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Access:
    """An operation's access rule, as data.

    Attributes:
        role: who may call it.
        on: what it acts on (the record whose campaign the role is checked against).
        turns: fields of the request that, when set, must name turns of the target campaign (a turn of
            another campaign answers like a missing one).
    """

    role: Role
    on: On = On.NOTHING
    turns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rest:
    """An operation's REST door: method, path under ``/api/v1`` (its ``{ids}`` are the operation's) and status."""

    method: str
    path: str
    status: int = 200
    raw_body: bool = False
    """The request body is the bytes of the request model's ``data`` (an upload), not JSON."""


@dataclass
class Call(Generic[B]):
    """One call of an operation: the services, the caller, the ids and the request, and the campaign the
    access check resolved (None for an operation on nothing)."""

    ctx: Services
    caller: Principal
    ids: dict[str, str]
    body: B
    campaign_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def id(self, name: str) -> str:
        return self.ids[name]

    async def run(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A blocking store call, off the event loop."""
        return await self.ctx.run(fn, *args, **kwargs)


Handler = Callable[[Call[Any]], Awaitable[Any]]
Streamer = Callable[[Call[Any]], Awaitable[AsyncIterator[dict[str, Any]]]]


@dataclass(frozen=True)
class Operation:
    """One use case: its name (the MCP tool's), handler, input, output, access rule and doors."""

    name: str
    family: str
    summary: str
    handler: Handler
    access: Access
    ids: tuple[str, ...]
    body: type[BaseModel]
    output: Any
    rest: Rest | None
    mcp: bool = True
    rest_only: str | None = None
    """Why the operation has no MCP tool (it has a REST door only)."""
    stream: Streamer | None = None
    """A server-sent event form of the operation (REST only: an MCP tool call has one answer)."""
    optional_body: bool = False
    """The REST body may be left out (every field has a default)."""


_TABLE: dict[str, Operation] = {}


def operation(
    *,
    family: str,
    access: Access,
    rest: Rest | None,
    ids: tuple[str, ...] = (),
    body: type[BaseModel] = Empty,
    output: Any = None,
    mcp: bool = True,
    rest_only: str | None = None,
    stream: Streamer | None = None,
    name: str | None = None,
) -> Callable[[Handler], Handler]:
    """Declare a handler an operation and put it in the table (its docstring's first line is its summary)."""

    def register(handler: Handler) -> Handler:
        op_name = name or handler.__name__
        if op_name in _TABLE:
            raise ValueError(f"operation {op_name!r} is declared twice")
        optional = all(not f.is_required() for f in body.model_fields.values())
        _TABLE[op_name] = Operation(
            name=op_name,
            family=family,
            summary=(handler.__doc__ or op_name).strip().splitlines()[0],
            handler=handler,
            access=access,
            ids=ids,
            body=body,
            output=output,
            rest=rest,
            mcp=mcp and rest_only is None,
            rest_only=rest_only,
            stream=stream,
            optional_body=optional,
        )
        return handler

    return register


def table() -> dict[str, Operation]:
    """Every declared operation by name (the families' modules must be imported first)."""
    return dict(_TABLE)
