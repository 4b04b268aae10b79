"""A test's engines for every model seat, bound through the builders the way production binds ``build_engine``.

:class:`ScriptedSeats` is an engine factory (picklable, so Ray hands it to each replica): the narrator
echoes; the extractor proposes a new character for every name of ``names`` the narration mentions; the
summarizer writes a fixed summary; the judge finds every proposal that mentions ``forbidden`` breaking
every axiom. Each engine answers by the schema it is asked for, as a model constrained to it would.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from narrator.engines import EchoEngine, Message
from schemas.serving import ServeSettings

SCRIPTED_SUMMARY = "The scripted summarizer wrote this summary."


class ScriptedEngine(EchoEngine):
    """The echo engine's narration; structured answers written from the request, by schema."""

    def __init__(self, model: str, *, forbidden: str, names: tuple[str, ...]) -> None:
        super().__init__(model)
        self.forbidden = forbidden.lower()
        self.names = names

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        yield f"[{self.model}]"  # who narrated, in the narration itself
        async for piece in super().stream(messages, max_tokens=max_tokens, temperature=temperature, seed=seed):
            yield " " + piece if not piece.startswith(" ") else piece

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        self.calls.append(messages)
        title = schema.get("title")
        said = "\n".join(m["content"] for m in messages)
        if title == "ExtractionBatch":
            narration = said.rsplit("Narration:", 1)[-1]
            found = [n for n in self.names if n in narration]
            proposals = [
                {"content": {"type": "entity", "kind": "character", "name": n}, "confidence": 0.95, "quote": n}
                for n in found
            ]
            return json.dumps({"proposals": proposals})
        if title == "AxiomAnswer":
            axioms = re.findall(r"^- (\S+): ", messages[0]["content"], re.MULTILINE)
            asked = re.findall(r"^- (\S+) \(\w+\): (.*)$", messages[1]["content"], re.MULTILINE)
            verdicts = [
                {"proposal_id": pid, "axiom_id": aid, "verdict": "breaks", "reason": f"it names {self.forbidden}"}
                for pid, text in asked
                if self.forbidden in text.lower()
                for aid in axioms
            ]
            return json.dumps({"verdicts": verdicts})
        if title == "SceneFormationAnswer":
            return json.dumps({"summary": SCRIPTED_SUMMARY, "memories": []})
        return "{}"


@dataclass(frozen=True)
class ScriptedSeats:
    """An engine factory with ``build_engine``'s signature: one :class:`ScriptedEngine` per seat, named for
    it (the narrator's by the settings' narrator model)."""

    forbidden: str = "dragon"
    names: tuple[str, ...] = ("Dragon",)

    def __call__(self, settings: ServeSettings, *, role: str = "narrator") -> ScriptedEngine:
        model = settings.narrator_model if role == "narrator" else f"scripted-{role}"
        return ScriptedEngine(model, forbidden=self.forbidden, names=self.names)
