"""The cluster lane's Ray nodes as containers of the CPU image (``.ci/containers cluster``).

:class:`ContainerRayCluster` is :class:`tests.cluster.cluster.RayCluster` with each node a ``podman run``
of the image (``LK_CLUSTER_IMAGE``) instead of a ``ray start`` process: host networking, so every node
gets ports of its own (GCS and dashboard on the head; node manager, object manager, metrics export,
dashboard agent, runtime-env agent and a worker port range on each), its own ``--num-cpus`` and a
``--shm-size`` for its object store. The lane's folder and Ray's temp dir are mounted at the same paths
in every node (Ray's sockets and the head's embedded vector index live there, as in the process lane);
the checks of ``test_cluster.py`` run unchanged against it. A node is killed with ``podman kill``
(SIGKILL to every process of the container) and stopped with ``podman stop`` (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.cluster import _LIST_NODES, _REACH_FROM_HEAD, HEAD_RESOURCE, RayCluster, RayNode
from tests.servers import free_port

# what a node's environment takes from the lane's (the rest of the host's environment stays outside)
PASSED_ENV = ("LOREKEEPER_", "RAY_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "PYTHONUNBUFFERED")
RAY_UID, RAY_GID = 1000, 100


def podman_argv() -> list[str]:
    """The podman command of the lane (``LK_PODMAN``: e.g. ``nice -n 19 ionice -c3 podman``)."""
    return shlex.split(os.environ.get("LK_PODMAN", "podman"))


@dataclass
class ContainerRayCluster(RayCluster):
    """A head and workers as containers of ``image`` (see the module docstring)."""

    image: str = ""
    run_id: str = field(default_factory=lambda: os.environ.get("LK_RUN_ID", f"lk-cluster-{os.getpid()}"))
    worker_cpus: int = 2
    containers: dict[str, str] = field(default_factory=dict)
    ports: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for folder in (self.root, self.temp_dir):
            os.chown(folder, RAY_UID, RAY_GID)
            folder.chmod(0o777)

    def podman(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*podman_argv(), *args], capture_output=True, text=True, timeout=timeout, check=check)

    def _start(self, name: str, args: list[str], resources: dict[str, float]) -> RayNode:
        container = f"{self.run_id}-{name}"
        ports = {
            key: free_port()
            for key in ("node-manager", "object-manager", "metrics-export", "dashboard-agent-listen")
            + ("dashboard-agent-grpc", "runtime-env-agent")
        }
        first = 20000 + 1000 * len(self.nodes)  # a worker port range per node, below the ephemeral ports
        self.ports[name] = {**ports, "min-worker": first, "max-worker": first + 999}
        cpus = self.cpus_per_node if name == "head" else self.worker_cpus
        env = [f"--env={k}={v}" for k, v in self.env.items() if k.startswith(PASSED_ENV)]
        mounts = [f"--volume={self.root}:{self.root}", f"--volume={self.temp_dir}:{self.temp_dir}"]
        log = self.root / f"ray-{name}.log"
        handle = log.open("wb")
        proc = subprocess.Popen(
            [
                *podman_argv(),
                "run",
                "--rm",
                f"--name={container}",
                "--network=host",
                "--no-healthcheck",
                "--shm-size=2g",
                *mounts,
                *env,
                self.image,
                "ray",
                "start",
                *args,
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--num-cpus={cpus}",
                "--num-gpus=0",
                f"--resources={json.dumps(resources)}",
                *(f"--{key}-port={port}" for key, port in self.ports[name].items()),
                "--disable-usage-stats",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,
        )
        node = RayNode(name, proc, log)
        self.nodes[name] = node
        self.containers[name] = container
        return node

    def _in_head(self, script: str, *args: str, timeout: float) -> str:
        """Run a Python script with the image's Ray in the head's container; its stdout."""
        done = self.podman("exec", self.containers["head"], "python", "-c", script, *args, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"in the head container: exit {done.returncode}\n{done.stderr[-3000:]}")
        return done.stdout

    def _alive_nodes(self) -> list[dict[str, Any]]:
        return json.loads(self._in_head(_LIST_NODES, self.address, timeout=60).strip().splitlines()[-1])

    def _reach_from_head(self, name: str) -> None:
        out = self._in_head(_REACH_FROM_HEAD, self.address, HEAD_RESOURCE, f"lorekeeper_{name}", timeout=180)
        assert out.strip().splitlines()[-1] == self.nodes[name].node_id, out

    def kill_worker(self, name: str) -> list[int]:
        """``podman kill`` (SIGKILL) the worker's container: every process of the node at once."""
        pids = self._container_pids(name)
        self.podman("kill", "--signal=KILL", self.containers[name], timeout=60)
        self.nodes[name].proc.wait(timeout=60)
        return pids

    def _container_pids(self, name: str) -> list[int]:
        top = self.podman("top", self.containers[name], "hpid", timeout=30, check=False)
        return [int(p) for p in top.stdout.split()[1:] if p.isdigit()]

    def stop(self) -> None:
        """``podman stop`` every node (SIGTERM, then SIGKILL after 30 s), then keep Ray's logs."""
        for name in reversed(list(self.nodes)):
            with contextlib.suppress(subprocess.SubprocessError):
                self.podman("stop", "--time=30", self.containers[name], timeout=90, check=False)
        for name, node in self.nodes.items():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=30)
            with contextlib.suppress(subprocess.SubprocessError):
                self.podman("rm", "--force", "--ignore", self.containers[name], timeout=60, check=False)
        for logs in self.temp_dir.glob("session_*/logs"):
            shutil.copytree(
                logs,
                self.root / "ray-logs" / logs.parent.name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("*.sock", "sockets"),
                ignore_dangling_symlinks=True,
            )
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def make_cluster(root: Path, env: dict[str, str]) -> RayCluster:
    """The lane's cluster: containers of ``LK_CLUSTER_IMAGE`` when it is set, else ``ray start`` processes."""
    image = os.environ.get("LK_CLUSTER_IMAGE", "")
    if not image:
        return RayCluster(root, env)
    # the head takes every Serve replica once the worker is killed (3.5 CPUs of the serve config)
    return ContainerRayCluster(root, env, cpus_per_node=4, image=image)
