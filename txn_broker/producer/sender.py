"""The sender: buffers drained from the accumulator become numbered segments, uploaded to
storage in parallel (with the log's segment builder) and only then registered in the
partition logs, so that no reader can see a partial object. Each segment carries the next
sequence number of its (producer id, partition): a registration retried after a lost reply
is stored once, and a gap is refused (docs/semantics.md, "Idempotent appends")."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

import pyarrow as pa

from ..errors import UnknownProducerStateError
from ..faults import fault_point
from ..log.segment_writer import StagedSegment, stage_segment, write_segments
from ..log.types import AppendResult, ProducerIdentity, SegmentWrite
from ..retry import retrying
from ..storage import ObjectStore
from ..topics import TopicMeta
from .accumulator import BufferKey

#: times a registration starts its sequences again after the broker forgot them
_SEQUENCE_RESTARTS = 6


class SegmentSender:
    def __init__(self, store: ObjectStore, upload_threads: int, retry_budget_ms: int | None = None) -> None:
        self._store = store
        self._budget_ms = retry_budget_ms
        self._upload_threads = upload_threads
        self._pool: ThreadPoolExecutor | None = None
        #: uploaded, not yet acknowledged
        self.pending: list[SegmentWrite] = []
        #: numbered, but writing them failed: the next flush writes them again
        self.unuploaded: list[StagedSegment] = []
        self.next_seq: dict[BufferKey, int] = {}

    def upload(self, ident: ProducerIdentity, drained: list[tuple[TopicMeta, int, pa.Table]]) -> None:
        """Number ``drained`` and encode it straight into the store, after the batches
        whose write failed before (they hold the lower sequences); on success they are
        pending registration."""
        staged, self.unuploaded = self.unuploaded, []
        for meta, partition, table in drained:
            key = (meta.topic_id, partition)
            seq = self.next_seq.get(key, 0)
            self.next_seq[key] = seq + 1
            staged.append(stage_segment(
                table, topic_id=meta.topic_id, topic=meta.name, partition=partition,
                compression=meta.compression, base_sequence=seq, schema_version=meta.schema_version,
                name=f"{ident.producer_id}-{ident.epoch}-{seq}-{uuid.uuid4().hex[:12]}"))
        if not staged:
            return
        if len(staged) > 1 and self._pool is None:
            self._pool = ThreadPoolExecutor(self._upload_threads, "txn-broker-upload")
        try:
            written = write_segments(self._store, staged, self._pool, self._budget_ms)
        except BaseException:
            self.unuploaded = staged  # a retried flush or commit writes them again
            raise
        self.pending.extend(written)
        fault_point("produce.after_upload")

    def register(self, append: Callable[[list[SegmentWrite]], list[AppendResult]]) -> list[AppendResult]:
        """Register the pending segments with ``append`` (the coordinator's, retried)."""
        for _attempt in range(_SEQUENCE_RESTARTS):
            try:
                results = retrying(lambda: append(self.pending), self._budget_ms)
            except UnknownProducerStateError:
                # The broker forgot this producer's sequences (producer_id_expiration_ms).
                # Nothing else is in flight, so restart the affected partitions at 0.
                self._restart_sequences()
                continue
            self.pending = []
            return results
        raise UnknownProducerStateError("sequence state could not be re-established")

    def _restart_sequences(self) -> None:
        renumbered: list[SegmentWrite] = []
        counters: dict[BufferKey, int] = {}
        for w in sorted(self.pending, key=lambda w: (w.topic_id, w.partition, w.base_sequence)):
            key = (w.topic_id, w.partition)
            seq = counters.get(key, 0)
            counters[key] = seq + 1
            renumbered.append(replace(w, base_sequence=seq))
        self.pending = renumbered
        self.next_seq.update(counters)

    def resolve(self, registered: Callable[[str], bool]) -> None:
        """Before dropping unacknowledged uploads (abort), learn which were registered after
        all (``registered(object_key)``), so no sequence number is ever reused for different
        data."""
        for w in (s.write for s in self.unuploaded):  # never registered: their sequence numbers are free
            key = (w.topic_id, w.partition)
            self.next_seq[key] = min(self.next_seq.get(key, 0), w.base_sequence)
        self.unuploaded = []
        for w in self.pending:
            stored = retrying(partial(registered, w.object_key), self._budget_ms)
            if not stored:  # never stored: its sequence number is free again
                key = (w.topic_id, w.partition)
                self.next_seq[key] = min(self.next_seq.get(key, 0), w.base_sequence)
        self.pending = []

    def discard(self) -> None:
        """Forget everything unacknowledged (the transaction is gone with it)."""
        self.pending = []
        self.unuploaded = []

    def reset_sequences(self) -> None:
        """A new producer id or epoch: every partition starts again at sequence 0."""
        self.next_seq.clear()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
