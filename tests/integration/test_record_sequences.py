"""Sequence numbers per record (Kafka's protocol numbers records, not batches): a batch of
n records takes n sequence numbers; a retried batch (same first sequence and count, a new
object) is a duplicate answered with its original offsets; anything else below the next
sequence, or a gap, is out of order. Both backends."""

from __future__ import annotations

import pytest

from txn_broker.errors import OutOfOrderSequenceError
from txn_broker.log.types import ProducerIdentity, SegmentWrite

pytestmark = pytest.mark.integration


def batch(topic_id, first, n, key):
    return SegmentWrite(topic_id=topic_id, topic="t", partition=0, record_count=n, size_bytes=10,
                        object_key=key, base_sequence=first, max_timestamp_ms=0,
                        last_sequence=first + n - 1)


def test_record_sequences(backend):
    broker = backend.connect()
    topic_id = broker.create_topic("t").topic_id
    ident = ProducerIdentity(None, broker._coordinator.allocate_producer_id(), 0)
    append = broker._coordinator.append
    assert append(ident, None, [batch(topic_id, 0, 5, "a")])[0].base_offset == 0
    assert append(ident, None, [batch(topic_id, 5, 3, "b")])[0].base_offset == 5
    # a retry of the first batch, uploaded again under another key: a duplicate
    again = append(ident, None, [batch(topic_id, 0, 5, "a-retry")])[0]
    assert (again.duplicate, again.base_offset, again.record_count) == (True, 0, 5)
    for bad in (batch(topic_id, 0, 4, "c"),   # overlaps the stored batch, other count
                batch(topic_id, 2, 3, "d"),   # starts inside a stored batch
                batch(topic_id, 9, 1, "e")):  # a gap: 8 is next
        with pytest.raises(OutOfOrderSequenceError):
            append(ident, None, [bad])
    assert append(ident, None, [batch(topic_id, 8, 2, "f")])[0].base_offset == 8
    # a new epoch starts again at 0; the old epoch's batches are not its duplicates
    bumped = ProducerIdentity(None, ident.producer_id, 1)
    first = append(bumped, None, [batch(topic_id, 0, 5, "g")])[0]
    assert (first.duplicate, first.base_offset) == (False, 10)
    assert append(bumped, None, [batch(topic_id, 0, 5, "g2")])[0].base_offset == 10
    assert broker.describe_topic("t").partitions[0].high_watermark == 15
    broker.close()
