"""The interface every object store implements."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import pyarrow as pa

from ..errors import TxnBrokerError

#: what ``put`` stores: bytes, or any object with the buffer protocol (a ``pa.Buffer``)
ObjectData: TypeAlias = bytes | bytearray | memoryview | pa.Buffer


class ObjectNotFoundError(TxnBrokerError):
    """The object does not exist."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified_ms: int


class ObjectStore(Protocol):
    """Immutable objects by key. ``put`` is atomic: a reader sees the whole object or none.
    An object is never changed in place (a repeated ``put`` of a key stores equal data),
    which is what lets ``get_buffer`` hand out memory maps."""

    url: str

    def put(self, key: str, data: ObjectData) -> None:
        """Store ``data`` under ``key``, replacing nothing partially. Idempotent for equal data."""

    def get(self, key: str) -> bytes:
        """The whole object as bytes; ObjectNotFoundError if absent."""

    def get_buffer(self, key: str) -> pa.Buffer:
        """The whole object as an Arrow buffer, without copying it where the store can
        (a read-only memory map of a local file, the S3 response body as received); what
        segment readers use. ObjectNotFoundError if absent."""

    def head(self, key: str) -> ObjectInfo | None:
        """Size and time of an object, None if absent."""

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every complete object whose key starts with ``prefix``."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; absent keys are ignored."""
