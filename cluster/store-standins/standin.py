"""Entry point of the store stand-ins (cluster/store-standins/Containerfile; .ci/containers compose).

Where no image registry can be reached, cluster/docker-compose.standin.yml swaps the MinIO, OpenSearch
and Neo4j images of cluster/docker-compose.yml for images of this folder, built here from packages
that install here: the same servers the store contract tests start. Each takes its service's
environment, command and ports as the real image does, so the compose file's environment, secrets,
volumes and health checks stay as they are. Which one runs is the image's (its build argument
``STANDIN``, kept in ``/home/ray/standin-kind``) unless ``LK_STANDIN`` names another:

- ``minio``: nanio (S3 with SigV4) on :9000, from ``server DIR`` and ``MINIO_ROOT_USER`` /
  ``MINIO_ROOT_PASSWORD``; it answers MinIO's liveness probe ``/minio/health/live`` (no console on :9001).
- ``opensearch``: osmem-server (the OpenSearch API) behind HTTPS on :9200 with a self-signed
  certificate and HTTP basic auth of ``admin`` / ``OPENSEARCH_INITIAL_ADMIN_PASSWORD``.
- ``neo4j``: a FalkorDB server speaking Bolt on :7687 with the password of ``NEO4J_AUTH``,
  Lorekeeper's graph schema applied, and :7474 answering HTTP while the server answers PING. Its Bolt
  endpoint speaks FalkorDB's Cypher and takes the user name ``falkordb`` only (measured: ``neo4j`` and
  ``default`` are refused), so Lorekeeper needs ``LOREKEEPER_GRAPH_DIALECT=falkordb`` and
  ``LOREKEEPER_GRAPH_USERNAME=falkordb`` (docker-compose.standin.yml sets both). Not durable:
  FalkorDB's Bolt endpoint crashes on writes with AOF on (tests/cluster/test_cluster.py says the same).

Standard library plus the stand-in's own server; it stops on SIGTERM like the real images.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _stop_on_sigterm(stop: Any) -> None:
    signal.signal(signal.SIGTERM, lambda *_: stop())
    signal.signal(signal.SIGINT, lambda *_: stop())


def run_minio(args: list[str]) -> int:
    """nanio on :9000 with MinIO's credentials, data folder and liveness probe."""
    import uvicorn
    from nanio.app import build_app
    from nanio.auth.credentials import EnvCredentialResolver
    from nanio.config import Settings

    data = Path(args[1] if len(args) > 1 and args[0] == "server" else "/data")
    os.environ["NANIO_ACCESS_KEY"] = os.environ["MINIO_ROOT_USER"]
    os.environ["NANIO_SECRET_KEY"] = os.environ["MINIO_ROOT_PASSWORD"]
    data.mkdir(parents=True, exist_ok=True)
    s3 = build_app(Settings(data_dir=data, credentials=EnvCredentialResolver()))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/minio/health/live":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await s3(scope, receive, send)

    uvicorn.run(app, host="0.0.0.0", port=9000, log_level="warning")  # noqa: S104 - the container's port
    return 0


class _AuthProxy(http.server.BaseHTTPRequestHandler):
    """HTTPS with basic auth in front of osmem-server (plain HTTP on loopback)."""

    protocol_version = "HTTP/1.1"
    upstream = ("127.0.0.1", 9201)
    expected = ""

    def _forward(self) -> None:
        if self.headers.get("Authorization", "") != self.expected:
            body = b'{"error":"unauthorized","status":401}'
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="opensearch"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", "host", "connection")}
        upstream = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            upstream.request(self.command, self.path, body=payload, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def run_opensearch(_: list[str]) -> int:
    """osmem-server on loopback, served on :9200 over HTTPS with the admin password."""
    from osmem_server import resolve_binary

    password = os.environ["OPENSEARCH_INITIAL_ADMIN_PASSWORD"]
    _AuthProxy.expected = "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()
    folder = Path("/usr/share/opensearch/data")
    folder.mkdir(parents=True, exist_ok=True)
    osmem = subprocess.Popen([resolve_binary(), "--addr", "127.0.0.1:9201", "--no-stdin-watch", "--no-ja"], cwd=folder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain("/etc/standin/tls.crt", "/etc/standin/tls.key")
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 9200), _AuthProxy)  # noqa: S104
    server.socket = context.wrap_socket(server.socket, server_side=True)
    _stop_on_sigterm(lambda: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    finally:
        osmem.terminate()
        osmem.wait(timeout=15)
    return 0


def run_neo4j(args: list[str]) -> int:
    """FalkorDB with Bolt on :7687, NEO4J_AUTH's password, the schema, and :7474 for probes."""
    import redis

    from stores.graph.falkordb import EmbeddedFalkorGraphStore
    from stores.graph.falkordb_server import FalkorServer
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

    password = os.environ["NEO4J_AUTH"].partition("/")[2]
    server = FalkorServer(Path("/data/falkordb"), durable=False, bolt_port=7687, start_timeout_s=60.0)
    server.acquire()
    admin = EmbeddedFalkorGraphStore(server.path)  # constraints need GRAPH.CONSTRAINT, not Bolt
    try:
        admin.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    finally:
        admin.close()
    client = redis.Redis(unix_socket_path=str(server.socket_path), password=server.password)
    client.config_set("requirepass", password)
    client.close()
    probe = redis.Redis(unix_socket_path=str(server.socket_path), password=password)

    class Probe(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            try:
                ok = bool(probe.ping())
            except redis.RedisError:
                ok = False
            self.send_response(200 if ok else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    http_server = http.server.ThreadingHTTPServer(("0.0.0.0", 7474), Probe)  # noqa: S104
    _stop_on_sigterm(lambda: threading.Thread(target=http_server.shutdown).start())
    print("falkordb stand-in: bolt :7687 (user falkordb), probe :7474", flush=True)
    try:
        http_server.serve_forever()
    finally:
        server.password = password
        server.stop()
    return 0


def main(argv: list[str]) -> int:
    kind_file = Path("/home/ray/standin-kind")  # written by the Containerfile's STANDIN build argument
    kind = os.environ.get("LK_STANDIN") or (kind_file.read_text().strip() if kind_file.is_file() else "")
    runners = {"minio": run_minio, "opensearch": run_opensearch, "neo4j": run_neo4j}
    if kind not in runners:
        print(f"LK_STANDIN must be one of {sorted(runners)}, not {kind!r}", file=sys.stderr)
        return 2
    started = time.monotonic()
    print(f"{kind} stand-in starting", flush=True)
    code = runners[kind](argv)
    print(f"{kind} stand-in stopped after {time.monotonic() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
