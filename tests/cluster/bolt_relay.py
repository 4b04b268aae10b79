"""A loopback relay in front of FalkorDB's Bolt endpoint that drops the clients' GOODBYE messages.

Why: FalkorDB 4.16's Bolt endpoint leaves the *next* new connection unanswered (its handshake reply
never comes) after each client that says GOODBYE; the official ``neo4j`` driver says GOODBYE on
every ``close()``. Measured here: after three drivers closed, the next three connection attempts
each timed out; after a client was killed (its socket closed with no GOODBYE) nothing failed. On a
cluster every Ray Data actor, job driver and Serve replica closes its driver at some point, so each
later connection somewhere else could hang. The relay forwards everything except a GOODBYE and
closes the server side without it, which FalkorDB handles like a dropped client.

It also listens on 127.0.0.1 only (FalkorDB's own Bolt port listens on every interface).

Run: ``python -m tests.cluster.bolt_relay LISTEN_PORT TARGET_PORT``.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading

HANDSHAKE_BYTES = 20  # magic 0x6060B017 + four proposed versions
GOODBYE = b"\xb0\x02"  # a struct of no fields with signature 0x02


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            return None
        data += part
    return bytes(data)


def _client_to_server(client: socket.socket, server: socket.socket) -> None:
    """Forward the handshake, then whole chunked messages, except a GOODBYE."""
    try:
        hello = _recv_exact(client, HANDSHAKE_BYTES)
        if hello is None:
            return
        server.sendall(hello)
        pending: list[bytes] = []
        while True:
            header = _recv_exact(client, 2)
            if header is None:
                return
            size = int.from_bytes(header, "big")
            if size == 0:
                if not pending:  # a NOOP keep-alive
                    server.sendall(header)
                    continue
                payload = b"".join(p[2:] for p in pending)
                if payload != GOODBYE:
                    server.sendall(b"".join(pending) + header)
                pending = []
                continue
            body = _recv_exact(client, size)
            if body is None:
                return
            pending.append(header + body)
    except OSError:
        return
    finally:
        # close the server side without a GOODBYE: FalkorDB treats it like a dropped client
        _shut(server, client)


def _server_to_client(server: socket.socket, client: socket.socket) -> None:
    try:
        while True:
            data = server.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    finally:
        _shut(client, server)


def _shut(*sockets: socket.socket) -> None:
    """Shut both directions of each socket, whichever is already gone."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _serve_one(client: socket.socket, target_port: int) -> None:
    try:
        server = socket.create_connection(("127.0.0.1", target_port), timeout=10)
    except OSError:
        client.close()
        return
    server.settimeout(None)
    back = threading.Thread(target=_server_to_client, args=(server, client), daemon=True)
    back.start()
    _client_to_server(client, server)
    back.join()
    client.close()
    server.close()


def main(listen_port: int, target_port: int) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(128)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(client, target_port), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
