"""Container health check of the Lorekeeper images (Docker HEALTHCHECK and compose).

    python cluster/healthcheck.py --ray                      # this node's raylet, through Ray's dashboard agent
    python cluster/healthcheck.py http://127.0.0.1:8000/health   # the API (Ray Serve ingress)

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
RAYLET_HEALTH_URL = "http://127.0.0.1:52365/api/local_raylet_healthz"


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
    parser.add_argument("url", nargs="?", help="URL to probe (default: this node's raylet, implies --ray)")
    parser.add_argument("--ray", action="store_true", help="probe a Ray endpoint: send the Ray auth token")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds")
    args = parser.parse_args(argv)
    is_ray = args.ray or args.url is None
    url = args.url or RAYLET_HEALTH_URL
    healthy, reason = probe(url, token=ray_token() if is_ray else None, timeout=args.timeout)
    print(f"{'healthy' if healthy else 'unhealthy'}: {url} {reason}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
