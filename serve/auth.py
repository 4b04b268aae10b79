"""API keys scoped to campaigns, with an admin scope for libraries, ingest and keys.

A key reads ``lk_<id>_<secret>``; the graph keeps ``(:ApiKey {uid: id, hash, admin, campaigns})``
with the sha256 of the whole key, never the key. Keys are managed with ``lorekeeper keys
create|list|revoke`` or over the API (an admin any key; a campaign's GM the player keys of that
campaign: :mod:`serve.operations.keys`); a file of admin keys (``LOREKEEPER_API_KEYS_FILE``, one per line: a mounted
Secret) may add more. With no key at all and the API bound to loopback, the API runs open (a
laptop); bound to any other address it refuses to start without keys. Once a key has existed the API
stays closed, even after every key is revoked (revoking the last key must not make every caller admin).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from schemas.common import Authority, utc_now
from schemas.errors import LorekeeperError, NotFound
from schemas.serving import ApiKeyInfo, KeyRole
from stores.graph.base import GraphStore

KEY_PREFIX = "lk"
_LISTED = ("name", "admin", "role", "campaigns", "character_entity_id", "created_at", "revoked")
_CACHE_S = 5.0  # a revoked key stops working within this many seconds


class Unauthorized(LorekeeperError):
    """No key, or a key that is unknown or revoked."""

    status_code = 401
    code = "unauthorized"


class Forbidden(LorekeeperError):
    """A valid key without the scope for this campaign or operation."""

    status_code = 403
    code = "forbidden"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling and what they may touch."""

    key_id: str
    admin: bool = False
    campaigns: frozenset[str] = field(default_factory=frozenset)
    role: KeyRole = KeyRole.PLAYER
    character_entity_id: str | None = None
    """The character a player key plays (its own memories; later, what that character may know)."""

    @property
    def label(self) -> str:
        """Who the caller is, as the server records it (``proposed_by``): ``admin:ID``, ``gm:ID``, ``player:ID``."""
        return f"{'admin' if self.admin else self.role.value}:{self.key_id}"

    def plays(self, campaign_id: str) -> bool:
        """Whether the key may play and read the campaign (any key of it, or an admin key)."""
        return self.admin or campaign_id in self.campaigns

    def runs(self, campaign_id: str) -> bool:
        """Whether the key is the campaign's GM (or an admin)."""
        return self.admin or (campaign_id in self.campaigns and self.role is KeyRole.GM)

    def require_authority(self, authority: Authority) -> None:
        """Refuse a claimed authority above the key's: a player speaks as a player, a GM as the GM or a
        player, an admin also as a source; ``system`` is the product's own (extractor, former, import)
        and no caller may claim it."""
        allowed = _CLAIMS["admin" if self.admin else self.role.value]
        if authority not in allowed:
            raise Forbidden(
                f"this key ({'admin' if self.admin else self.role.value}) may not claim {authority.value} authority"
                f" (it may claim {', '.join(a.value for a in allowed)})"
            )

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("this needs an admin key")

    def require_campaign(self, campaign_id: str) -> None:
        if not (self.admin or campaign_id in self.campaigns):
            raise Forbidden(f"this key may not use campaign {campaign_id!r}")


_CLAIMS = {
    "player": (Authority.PLAYER,),
    "gm": (Authority.PLAYER, Authority.GM),
    "admin": (Authority.PLAYER, Authority.GM, Authority.SOURCE),
}

OPEN = Principal(key_id="open", admin=True)
"""The caller on an open laptop API (loopback, no keys configured)."""


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    """Create, list, revoke and verify keys (the graph is the record; verification is cached briefly)."""

    def __init__(self, graph: GraphStore, *, keys_file: Path | None = None) -> None:
        self.graph = graph
        self._file_hashes: frozenset[str] = frozenset()
        if keys_file is not None:
            lines = keys_file.read_text(encoding="utf-8").splitlines()
            self._file_hashes = frozenset(_hash(line.strip()) for line in lines if line.strip())
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._any: tuple[float, bool] = (0.0, False)
        self._lock = threading.Lock()

    # -- management -------------------------------------------------------------------------------

    def create(
        self,
        name: str,
        *,
        admin: bool = False,
        campaigns: list[str] | None = None,
        role: KeyRole = KeyRole.PLAYER,
        character_entity_id: str | None = None,
    ) -> tuple[str, ApiKeyInfo]:
        """A new key; the secret is returned once and never stored."""
        key_id = secrets.token_hex(6)
        key = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        info = ApiKeyInfo(
            id=key_id,
            name=name,
            admin=admin,
            role=role,
            campaigns=sorted(set(campaigns or [])),
            character_entity_id=character_entity_id,
            created_at=utc_now().isoformat(),
        )
        self.graph.run(
            "CREATE (k:ApiKey) SET k = $props",
            {"props": {"uid": key_id, "hash": _hash(key), **info.model_dump(exclude={"id"}, exclude_none=True)}},
        )
        self._forget()
        return key, info

    def list(self) -> list[ApiKeyInfo]:
        rows = self.graph.run("MATCH (k:ApiKey) RETURN k ORDER BY k.created_at")
        return [
            ApiKeyInfo(
                id=r["k"]["uid"],
                **{f: r["k"][f] for f in _LISTED if f in r["k"]},
            )
            for r in rows
        ]

    def get(self, key_id: str) -> ApiKeyInfo:
        """One key as listed.

        Raises:
            NotFound: no such key.
        """
        rows = self.graph.run("MATCH (k:ApiKey {uid: $id}) RETURN k", {"id": key_id})
        if not rows:
            raise NotFound("auth", f"no API key {key_id!r}")
        node = rows[0]["k"]
        return ApiKeyInfo(id=node["uid"], **{f: node[f] for f in _LISTED if f in node})

    def revoke(self, key_id: str) -> None:
        rows = self.graph.run("MATCH (k:ApiKey {uid: $id}) SET k.revoked = true RETURN k.uid AS uid", {"id": key_id})
        if not rows:
            raise NotFound("auth", f"no API key {key_id!r}")
        self._forget()

    def grant(self, key_id: str, campaign_id: str) -> None:
        """Let a key use one more campaign."""
        rows = self.graph.run("MATCH (k:ApiKey {uid: $id}) RETURN k.campaigns AS c", {"id": key_id})
        if not rows:
            raise NotFound("auth", f"no API key {key_id!r}")
        campaigns = sorted(set(rows[0]["c"] or []) | {campaign_id})
        self.graph.run("MATCH (k:ApiKey {uid: $id}) SET k.campaigns = $c", {"id": key_id, "c": campaigns})
        self._forget()

    def _forget(self) -> None:
        with self._lock:
            self._cache.clear()
            self._any = (0.0, False)

    # -- verification -----------------------------------------------------------------------------

    def any_configured(self) -> bool:
        """Whether any key exists or ever existed (then every request needs one).

        Revoked keys count: keys are never deleted, so once one was created the answer stays true,
        and is then cached for good.
        """
        if self._file_hashes:
            return True
        now = time.monotonic()
        with self._lock:
            at, value = self._any
            if value or now - at < _CACHE_S:
                return value
        value = bool(self.graph.run("MATCH (k:ApiKey) RETURN k.uid LIMIT 1"))
        with self._lock:
            self._any = (now, value)
        return value

    def verify(self, key: str | None) -> Principal:
        """The principal behind a presented key.

        Raises:
            Unauthorized: no key, or an unknown or revoked one.
        """
        if not key:
            raise Unauthorized("send an API key as 'Authorization: Bearer KEY'")
        digest = _hash(key)
        if any(hmac.compare_digest(digest, h) for h in self._file_hashes):
            return Principal(key_id="file", admin=True)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < _CACHE_S:
            principal = hit[1]
        else:
            principal = self._lookup(key, digest)
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (now, principal)
        if principal is None:
            raise Unauthorized("unknown or revoked API key")
        return principal

    def _lookup(self, key: str, digest: str) -> Principal | None:
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != KEY_PREFIX:
            return None
        rows = self.graph.run("MATCH (k:ApiKey {uid: $id}) RETURN k", {"id": parts[1]})
        if not rows:
            return None
        node = rows[0]["k"]
        if node.get("revoked") or not hmac.compare_digest(node.get("hash", ""), digest):
            return None
        return Principal(
            key_id=node["uid"],
            admin=bool(node.get("admin")),
            campaigns=frozenset(node.get("campaigns") or []),
            role=KeyRole(node.get("role") or KeyRole.PLAYER.value),
            character_entity_id=node.get("character_entity_id"),
        )
