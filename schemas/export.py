"""JSON Schema export of the data model, for clients, docs and contract checks.

:data:`SCHEMA_MODELS` maps each public model's class name to the class: every pydantic model named
in the ``__all__`` of the model modules, except abstract bases. :func:`export_json_schemas`
writes one ``<Name>.schema.json`` per registered model, deterministically.
"""

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from schemas import events, knowledge, media, story

__all__ = ["SCHEMA_MODELS", "export_json_schemas", "json_schema_of", "schema_filename"]

_MODEL_MODULES: tuple[ModuleType, ...] = (knowledge, story, events, media)
# bases that are not documents on their own
_ABSTRACT: frozenset[type[BaseModel]] = frozenset({events.BaseStateEvent})


def _collect(modules: tuple[ModuleType, ...]) -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if not (isinstance(obj, type) and issubclass(obj, BaseModel)) or obj in _ABSTRACT:
                continue
            if name in found and found[name] is not obj:
                raise RuntimeError(f"two public models are named {name!r}; rename one")
            found[name] = obj
    return dict(sorted(found.items()))


SCHEMA_MODELS: dict[str, type[BaseModel]] = _collect(_MODEL_MODULES)
"""Public model name -> model class, sorted by name."""


def schema_filename(name: str) -> str:
    """File name of a model's schema: ``<Name>.schema.json``."""
    return f"{name}.schema.json"


def json_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """Return the validation-mode JSON Schema of ``model``."""
    return model.model_json_schema(mode="validation")


def export_json_schemas(directory: Path) -> list[Path]:
    """Write one JSON Schema file per registered model into ``directory``.

    Output is deterministic (sorted keys, indent 2, trailing newline) so it can be committed
    and diffed. Files are only rewritten when their content changes; other files in the
    directory are left alone.

    Args:
        directory: target folder; created with its parents when missing.

    Returns:
        The path of every model's schema file (written or already current), by model name.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, model in SCHEMA_MODELS.items():
        text = json.dumps(json_schema_of(model), sort_keys=True, indent=2, ensure_ascii=False)
        path = directory / schema_filename(name)
        text += "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
