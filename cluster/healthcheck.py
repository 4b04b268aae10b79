"""Container health check of the Lorekeeper images (Docker HEALTHCHECK and compose).

    python cluster/healthcheck.py                            # what the container says it is (the images' HEALTHCHECK)
    python cluster/healthcheck.py --ray                      # this node's raylet, through Ray's dashboard agent
    python cluster/healthcheck.py http://127.0.0.1:8000/health   # the API (Ray Serve ingress)

Without a URL it probes ``LOREKEEPER_HEALTHCHECK_URL`` when set (a container that serves the API sets it to
its own /health), else this node's raylet through Ray's dashboard agent on ``LOREKEEPER_RAY_AGENT_PORT``
(default 52365; a node started with another ``--dashboard-agent-listen-port``, as on a host network where
another Ray holds the default, says so there). ``--ray`` always probes the raylet.
Exits 0 when the endpoint answers 2xx within the timeout, 1 otherwise, and prints one line saying why.
With ``--ray`` the Ray token (``RAY_AUTH_TOKEN`` or the file named by ``RAY_AUTH_TOKEN_PATH``) is sent as a
bearer token, because Ray's HTTP endpoints demand it when token authentication is on; it is never sent
to any other URL. Standard library only: it runs in every image before anything else is importable.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

# Ray's dashboard agent listens on every node (``--dashboard-agent-listen-port``, default 52365);
# KubeRay's own probes use the same endpoint.
RAY_AGENT_PORT = 52365
RAYLET_HEALTH_URL = f"http://127.0.0.1:{RAY_AGENT_PORT}/api/local_raylet_healthz"
URL_ENV = "LOREKEEPER_HEALTHCHECK_URL"
RAY_AGENT_PORT_ENV = "LOREKEEPER_RAY_AGENT_PORT"


def raylet_health_url() -> str:
    """This node's raylet health endpoint, on the agent port the environment names (default 52365)."""
    port = os.environ.get(RAY_AGENT_PORT_ENV, "").strip()
    if not port:
        return RAYLET_HEALTH_URL
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{RAY_AGENT_PORT_ENV} must be a TCP port, not {port!r}")
    return RAYLET_HEALTH_URL.replace(f":{RAY_AGENT_PORT}/", f":{int(port)}/", 1)


def ray_token() -> str | None:
    """The Ray auth token from the environment, or None when token authentication is not configured."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
    return None


def probe(url: str, *, token: str | None, timeout: float) -> tuple[bool, str]:
    """GET ``url``; return (healthy, reason)."""
    request = urllib.request.Request(url, method="GET")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return 200 <= response.status < 300, f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"unreachable ({reason})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "url", nargs="?", help=f"URL to probe (default: ${URL_ENV}, else this node's raylet, which implies --ray)"
    )
    parser.add_argument("--ray", action="store_true", help="probe a Ray endpoint: send the Ray auth token")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds")
    args = parser.parse_args(argv)
    url = args.url or ("" if args.ray else os.environ.get(URL_ENV, "").strip())
    is_ray = args.ray or not url
    if not url:
        try:
            url = raylet_health_url()
        except ValueError as exc:
            print(f"unhealthy: {exc}")
            return 1
    healthy, reason = probe(url, token=ray_token() if is_ray else None, timeout=args.timeout)
    print(f"{'healthy' if healthy else 'unhealthy'}: {url} {reason}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
