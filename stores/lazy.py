"""Lazily opened clients: Ray pickles store objects to workers, so clients open in the process using them."""

from __future__ import annotations

import threading
from typing import Any


class LazyClient:
    """Base for backends whose client must open on first use, inside the process that uses it.

    Subclasses implement :meth:`_open` and read the client through :attr:`client`. Pickling drops the
    open client (sockets, file locks and native handles do not survive a trip to a Ray worker) and the
    copy reopens its own on first use.
    """

    _client: Any = None

    def _open(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def client(self) -> Any:
        if self._client is None:
            lock = self.__dict__.setdefault("_open_lock", threading.Lock())
            with lock:
                if self._client is None:
                    self._client = self._open()
        return self._client

    @property
    def is_open(self) -> bool:
        return self._client is not None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_client", None)
        state.pop("_open_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the client; the object stays usable and reopens on next use."""
        client, self._client = self._client, None
        closer = getattr(client, "close", None)
        if callable(closer):
            closer()
