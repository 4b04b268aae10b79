"""A warm local Ray head (``lorekeeper up``): where it listens, and whether it still runs.

``lorekeeper up`` starts a Ray head on this machine and records it in ``<data folder>/ray/head.json``;
``lorekeeper ingest`` (when its stages run on Ray) and ``lorekeeper serve`` read that record and attach
to the head (``ray.init(address=…)``) instead of starting a Ray of their own, and ``lorekeeper down``
stops it. A record whose head no longer answers counts as none.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

HEAD_FILE = Path("ray") / "head.json"
"""Where the record lives, under the data folder."""


class RayHead(BaseModel):
    """The record ``lorekeeper up`` writes of the head it started."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field(description="The head's GCS address, host:port (what ray.init(address=…) takes).")
    pid: int = Field(gt=0, description="The `ray start --head --block` process; its process group is the head's.")
    temp_dir: str = Field(description="Ray's folder for the head's sessions, sockets and logs.")
    num_cpus: int = Field(gt=0, description="Logical CPUs the head offers (scheduling shares).")
    started_at: str = Field(description="When the head became ready (ISO 8601, UTC).")
    log: str = Field(description="The file the head's own output goes to.")

    def alive(self, timeout: float = 1.0) -> bool:
        """Whether the head's process runs and its GCS port accepts a connection."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # a process of another user took the id: not ours
            return False
        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            return False


def head_file(data_dir: Path) -> Path:
    return Path(data_dir) / HEAD_FILE


def read_head(data_dir: Path) -> RayHead | None:
    """The head recorded under ``data_dir``, or None when there is no record or it cannot be read."""
    path = head_file(data_dir)
    try:
        return RayHead.model_validate_json(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValidationError, ValueError):
        return None


def warm_address(data_dir: Path) -> str | None:
    """The address of a warm head of this data folder that answers now, or None."""
    head = read_head(data_dir)
    return head.address if head is not None and head.alive() else None
