"""The code of an earlier commit beside today's, in one process: a same-run "before" for a benchmark.

A benchmark on a shared machine compares only what it measures side by side, query by query. To time
the path a change replaced, :func:`modules_at` loads the listed modules as they were at a commit
(``git show REV:path``) under private names, rewriting their imports of each other to those names, so
the old classes run on today's stores and models (the modules not listed are today's). Nothing is
written to the working tree; no worktree, stash or checkout is needed.

Example: ``hybrid = modules_at("abc123", ["search/coverage.py", "search/hybrid.py"])["search.hybrid"]``
gives a ``HybridSearcher`` class whose coverage leg is the old one too.
"""

from __future__ import annotations

import re
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def modules_at(rev: str, paths: Sequence[str]) -> dict[str, types.ModuleType]:
    """The modules at ``paths`` (repository-relative, in dependency order) as they were at ``rev``.

    Returns:
        Each module by its dotted name (``search.hybrid``), loaded as ``before_<rev>.<dotted name>``.

    Raises:
        subprocess.CalledProcessError: ``rev`` or a path is unknown to git.
    """
    commit = subprocess.run(
        ["git", "rev-parse", "--short=10", rev], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    prefix = f"before_{commit}"
    names = [_dotted(p) for p in paths]
    pattern = re.compile(r"^(\s*)(from|import) (" + "|".join(re.escape(n) for n in names) + r")\b", re.M)
    for name in names:  # the import system imports a module's parent packages first
        parts = f"{prefix}.{name}".split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package not in sys.modules:
                sys.modules[package] = types.ModuleType(package)
                sys.modules[package].__path__ = []
    loaded: dict[str, types.ModuleType] = {}
    for path, name in zip(paths, names, strict=True):
        source = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=REPO, check=True, capture_output=True, text=True
        ).stdout
        source = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)} {prefix}.{m.group(3)}", source)
        module = types.ModuleType(f"{prefix}.{name}")
        module.__file__ = f"{REPO / path}@{commit}"
        sys.modules[module.__name__] = module  # dataclasses and pydantic look their module up while built
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the repository's own code
        loaded[name] = module
    return loaded
