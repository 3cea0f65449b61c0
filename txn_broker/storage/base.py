"""The interface every object store implements."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..errors import TxnBrokerError


class ObjectNotFoundError(TxnBrokerError):
    """The object does not exist."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified_ms: int


class ObjectStore(Protocol):
    """Immutable objects by key. ``put`` is atomic: a reader sees the whole object or none."""

    url: str

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing nothing partially. Idempotent for equal data."""

    def get(self, key: str) -> bytes:
        """The whole object; ObjectNotFoundError if absent."""

    def head(self, key: str) -> ObjectInfo | None:
        """Size and time of an object, None if absent."""

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every complete object whose key starts with ``prefix``."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; absent keys are ignored."""
