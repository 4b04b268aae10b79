"""Which model plays which seat: the engines a server has, a campaign's model roles, the calls a turn made.

A model plays four seats: the narrator, the state (proposal) extractor, the scene summarizer / memory
former and the axiom judge. A server has engines by name: ``narrator`` (its narrator's engine),
``extractor`` (its extractor's, when one is configured) and any named in ``LOREKEEPER_ENGINES``. A
campaign names which of them plays each seat (:class:`ModelRoles`); a seat left unset plays on the
deployment's engine for it. The embedding model is not a role a campaign can change: the recall and
knowledge indexes are built with the server's one model, so it is only reported.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

EngineName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
"""A configured engine's name: lower-case letters, digits, ``_``, ``.``, ``-`` (at most 63)."""

RESERVED_ENGINES = ("narrator", "extractor")
"""The names of the deployment's own engines (its narrator's and its extractor's)."""


class Seat(StrEnum):
    """A seat a model plays."""

    NARRATOR = "narrator"
    EXTRACTOR = "extractor"
    SUMMARIZER = "summarizer"
    JUDGE = "judge"


class ModelRoles(BaseModel):
    """The engine (by name) that plays each seat for a campaign; unset: the deployment's engine for the seat."""

    model_config = ConfigDict(extra="forbid")

    narrator: EngineName | None = Field(default=None, description="Narrates the turns.")
    extractor: EngineName | None = Field(default=None, description="Extracts the proposals of each turn.")
    summarizer: EngineName | None = Field(default=None, description="Forms memories and the summary at scene end.")
    judge: EngineName | None = Field(default=None, description="Judges proposals against the world's axioms.")

    def named(self) -> dict[str, str]:
        """The seats set, by seat name."""
        return {seat: name for seat, name in self.model_dump().items() if name is not None}


class SeatModel(BaseModel):
    """Who plays one seat for a campaign: the engine's name, its kind and model (None: nobody, e.g. no extractor)."""

    engine: str | None
    kind: str | None = None
    model: str | None = None
    chosen: bool = Field(default=False, description="True when the campaign named the engine; else the deployment's.")


class CampaignModels(BaseModel):
    """A campaign's model roles as they resolve on this server, with what the server has to choose from."""

    campaign_id: str
    roles: ModelRoles = Field(description="What the campaign named (unset: the deployment's).")
    seats: dict[Seat, SeatModel] = Field(description="Who plays each seat on this server.")
    embedding: str | None = Field(
        default=None, description="The embedding model of the server (not a campaign's choice: the indexes use it)."
    )
    available: list[str] = Field(description="The engines this server has, by name.")


class ModelCall(BaseModel):
    """One model call a turn made or asked for, as its prompt snapshot records it."""

    model_config = ConfigDict(extra="forbid")

    seat: Seat
    engine: str = Field(max_length=63, description="The engine's name on the server.")
    model: str = Field(max_length=200)
    max_tokens: int = Field(ge=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
