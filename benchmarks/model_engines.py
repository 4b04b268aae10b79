"""The engine a model-quality harness runs on, from its command line: the same flags for every harness.

``--engine local`` (the embedded default model), ``--engine openai --base-url URL --model NAME`` (any
OpenAI-compatible endpoint, unchanged), ``--engine echo`` (no model: the harness's plumbing alone).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=["local", "openai", "echo"], default="local")
    parser.add_argument("--base-url", default=None, help="The OpenAI-compatible endpoint (--engine openai).")
    parser.add_argument("--model", default="narrator", help="The model's name at the endpoint (--engine openai).")


def engine_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Any:
    """The engine the arguments name (the parser reports a missing --base-url)."""
    if args.engine == "openai":
        if not args.base_url:
            parser.error("--engine openai needs --base-url")
        from narrator.engines import OpenAIEngine

        return OpenAIEngine(args.base_url, args.model)
    if args.engine == "echo":
        from narrator.engines import EchoEngine

        return EchoEngine()
    from narrator.local_engine import LocalEngine

    return LocalEngine()
