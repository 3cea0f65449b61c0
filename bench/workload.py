"""Broker operations the cases share: fresh topics, producing chunks in transactions or
idempotently, and writing the same chunks with pyarrow alone."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa

from .servers import Backend


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(broker: Any, prefix: str, schema: pa.Schema, partitions: int = 1) -> str:
    name = unique(prefix)
    broker.create_topic(name, partitions=partitions, schema=schema)
    return name


def drop_topic(broker: Any, name: str) -> None:
    """Delete a topic and its objects, so repetitions do not fill the storage."""
    broker.delete_topic(name)


def produce_transactional(producer: Any, topic: str, chunks: list[pa.Table]) -> None:
    """One transaction per chunk (begin, send, commit)."""
    for chunk in chunks:
        with producer.transaction():
            producer.send(topic, chunk)


def produce_idempotent(producer: Any, topic: str, chunks: list[pa.Table]) -> None:
    """The same chunks without transactions: send, then flush, so each chunk becomes the
    same segment object as in a transaction and is durable when the call returns."""
    for chunk in chunks:
        producer.send(topic, chunk)
        producer.flush()


class ArrowWriter:
    """Writes tables as Arrow IPC files straight to the backend's storage with pyarrow's
    own file systems: the physical limit a broker's produce path is measured against."""

    def __init__(self, backend: Backend, durable: bool = True) -> None:
        self.fs, base = backend.arrow_fs()
        self.local = not backend.is_s3
        self.durable = durable
        self.base = f"{base}/{unique('pyarrow')}"
        if self.local:
            self.fs.create_dir(self.base)

    def write(self, name: str, table: pa.Table) -> None:
        path = f"{self.base}/{name}.arrow"
        with self.fs.open_output_stream(path) as out, pa.ipc.new_file(out, table.schema) as writer:
            writer.write_table(table)
        if self.local and self.durable:  # the broker's local store fsyncs each object
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def write_all(self, chunks: list[pa.Table]) -> None:
        for i, chunk in enumerate(chunks):
            self.write(f"chunk-{i:05d}", chunk)

    def clear(self) -> None:
        self.fs.delete_dir_contents(self.base, missing_dir_ok=True)
