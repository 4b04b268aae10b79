"""The slow narrator of tests/unit/test_sigterm.py as a process of its own, for the container lane's
'podman stop during a turn': an OpenAI-compatible endpoint on 127.0.0.1 (the containers share the host's
network) that streams its narration a piece every 0.4 s, so a turn is still in flight when SIGTERM comes.

    python .ci/containers.d/slow_model.py STATE_DIR     # writes STATE_DIR/port, then STATE_DIR/streaming
                                                        # each time a narration starts streaming

It is the host test's own model (imported from it), so the host test and the container check agree.
Run from the repository root with the project's Python.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.unit.test_sigterm import PIECES, _SlowModel  # noqa: E402 - after the path


class _Marker:
    """Stands in for the model's threading.Event: its set() leaves a file the lane waits for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def set(self) -> None:
        self.path.write_text(f"{time.time()}\n")


def main(state: Path) -> None:
    server = _SlowModel()
    server.streaming = _Marker(state / "streaming")  # type: ignore[assignment]
    (state / "port").write_text(f"{server.server_port}\n")
    (state / "narration").write_text("".join(PIECES).strip() + "\n")
    server.serve_forever()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
