"""The columnar RecordBatch v2 codec (what the listener uses on Produce and Fetch) held to
the record-at-a-time one it replaced, with Hypothesis: the same bytes encoded, the same
records decoded, and the same verdict on damaged payloads. The record-at-a-time writer
(``encode_batch``) and reader (``_decode_records``) are the reference here."""

from __future__ import annotations

import itertools
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txn_broker.kafka import recordbatch
from txn_broker.kafka.recordbatch import (
    CONTROL,
    TRANSACTIONAL,
    Record,
    RecordColumns,
    RecordFormatError,
    control_batch,
    decode_batches,
    encode_batch,
    encode_columns,
)

KEYS = st.one_of(st.none(), st.binary(max_size=40))
#: values across the 1- and 2-byte length varints and the 12-byte inline limit of Arrow's views
VALUES = st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=100, max_size=400))
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3)
TIMESTAMPS = st.one_of(st.just(-1), st.integers(0, 2**45))


@st.composite
def record_lists(draw: st.DrawFn, headers: bool = True) -> list[Record]:
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    out, delta = [], 0
    for gap in gaps:
        delta += gap
        out.append(Record(delta, draw(TIMESTAMPS), draw(KEYS), draw(VALUES),
                          tuple(draw(HEADERS)) if headers else ()))
        delta += 1
    return out


@st.composite
def uniform_runs(draw: st.DrawFn) -> list[Record]:
    """Runs of records of one size each, as producers write them (the columnar reader
    takes such runs at once): sizes on both sides of the 1- and 2-byte length varints."""
    out: list[Record] = []
    for _run in range(draw(st.integers(1, 4))):
        key = draw(st.one_of(st.none(), st.binary(min_size=0, max_size=16)))
        size = draw(st.sampled_from([0, 5, 40, 52, 53, 54, 60, 200]))
        for _ in range(draw(st.integers(1, 40))):
            # offset and timestamp deltas below 64: one varint byte each, the same length
            out.append(Record(len(out), 1_700_000_000_000 + len(out) % 60, key, bytes(size)))
    return out


def reference_decode(data: bytes) -> list[list[Record]]:
    """The records of each batch, read by the record-at-a-time reader."""
    out, pos = [], 0
    while pos < len(data):
        _, length, _, _, _ = struct.unpack_from(">qiibI", data, pos)
        body = pos + 21
        attributes, _, base_ts, _, _, _, _, count = struct.unpack_from(">hiqqqhii", data, body)
        payload = memoryview(data)[body + 40:pos + 12 + length]
        codec = attributes & recordbatch.COMPRESSION_MASK
        if codec:
            payload = memoryview(recordbatch._decompress(codec, bytes(payload)))
        out.append(recordbatch._decode_records(payload, count, base_ts))
        pos += 12 + length
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(), st.sampled_from(sorted(recordbatch.COMPRESSION_NAMES)),
       st.sampled_from([0, TRANSACTIONAL, TRANSACTIONAL | CONTROL]), st.integers(-1, 2**40), st.integers(-1, 2**31 - 1))
def test_columnar_encoder_writes_the_reference_bytes(records, compression, attributes, base_offset, base_sequence):
    kwargs = {"compression": compression, "attributes": attributes, "producer_id": 9, "producer_epoch": 2,
              "base_sequence": base_sequence}
    expected = encode_batch(base_offset, records, **kwargs)
    assert encode_columns(base_offset, RecordColumns.from_records(records), **kwargs) == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_lists(headers=False) | record_lists(), min_size=1, max_size=3),
       st.sampled_from(sorted(recordbatch.COMPRESSION_NAMES)))
def test_columnar_decoder_reads_the_reference_records(batches, compression):
    data = b"".join(encode_batch(100 * i, records, compression=compression, producer_id=5, producer_epoch=0,
                                 base_sequence=10 * i) for i, records in enumerate(batches))
    decoded = decode_batches(data)
    assert [b.records for b in decoded] == reference_decode(data) == batches
    for i, batch in enumerate(decoded):
        assert (batch.base_offset, batch.base_sequence, batch.compression) == (100 * i, 10 * i, compression)
        assert batch.columns.keys.type == batch.columns.values.type == recordbatch.pa.binary()
        assert batch.columns.headers is None or any(r.headers for r in batches[i])


@settings(max_examples=100, deadline=None)
@given(record_lists(headers=False) | uniform_runs())
def test_batches_without_headers_take_the_columnar_reader(records):
    data = encode_batch(0, records)
    columns = recordbatch._decode_columns(data, 61, len(data), len(records), records[0].timestamp_ms)
    assert columns is not None
    assert columns.to_records() == records


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(headers=False), st.integers(1, 5), st.integers(1, 4))
def test_columns_as_a_fetch_takes_them_from_a_segment_encode_the_same(records, before, chunks):
    """A Fetch hands the encoder a segment's columns as they are: a slice of a larger array
    (not copied to offset 0), or chunks when a table has several. The bytes are the same."""
    expected = encode_batch(3, records)
    columns = RecordColumns.from_records(records)
    padding = [b"x" * i for i in range(before)]

    def sliced(array):
        return recordbatch.pa.array(padding + array.to_pylist(), recordbatch.pa.binary()).slice(before)

    def chunked(array):
        cuts = sorted({0, len(array), *(len(array) * i // chunks for i in range(1, chunks))})
        return recordbatch.pa.chunked_array([array.slice(a, b - a) for a, b in itertools.pairwise(cuts)])

    for taken in (sliced, chunked):
        moved = RecordColumns(columns.offset_deltas, columns.timestamps, taken(columns.keys), taken(columns.values))
        assert encode_columns(3, moved) == expected


def test_control_batches_agree():
    for commit in (True, False):
        data = control_batch(7, 3, 1_700_000_000_000, commit=commit, producer_id=4, producer_epoch=1)
        (batch,) = decode_batches(data)
        assert batch.control and batch.transactional and batch.last_offset_delta == 3
        assert batch.records == reference_decode(data)[0]
        assert encode_columns(7, batch.columns, attributes=TRANSACTIONAL | CONTROL, producer_id=4,
                              producer_epoch=1) == data


def _verdict(call):
    try:
        return call()
    except RecordFormatError:
        return RecordFormatError


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(headers=False) | record_lists() | uniform_runs(), st.data())
def test_decoders_agree_on_damaged_payloads(records, data):
    """Bytes of the records changed, cut or added (the CRC fixed up so that the records
    themselves are read): the columnar reader refuses exactly what the reference refuses,
    and reads the same records otherwise."""
    batch = bytearray(encode_batch(0, records))
    damage = data.draw(st.sampled_from(["flip", "cut", "add"]))
    if damage == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(61, len(batch) - 1))
            batch[at] = data.draw(st.integers(0, 255))
    elif damage == "cut":
        del batch[data.draw(st.integers(61, len(batch) - 1)):]
    else:
        batch += data.draw(st.binary(min_size=1, max_size=8))
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    raw = bytes(batch)
    expected = _verdict(lambda: reference_decode(raw)[0])
    got = _verdict(lambda: decode_batches(raw)[0].records)
    assert got == expected


def test_an_empty_batch_cannot_be_encoded():
    with pytest.raises(ValueError):
        encode_columns(0, RecordColumns.from_records([]))
