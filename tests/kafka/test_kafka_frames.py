"""The listener's input handling: Hypothesis fuzzing of the frame decoder and the record
batch decoder (only their own errors, never a crash or another exception), the record batch
codec round trip, a flood of malformed, oversized and half-open connections that costs each
one its connection and never the server, unknown API keys and versions, and the loopback rule
of `txn-broker serve`."""

from __future__ import annotations

import io
import socket
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import MetadataRequest
from kio.schema.produce.v9 import ProduceRequest
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from txn_broker.kafka import SUPPORTED, codec, recordbatch
from txn_broker.kafka.recordbatch import Record, RecordFormatError, decode_batches, encode_batch


def frame(api_key: int, version: int, body: object, correlation_id: int = 1) -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=api_key, request_api_version=version,
                                                    correlation_id=correlation_id, client_id="fuzz"))
    entity_writer(type(body))(out, body)
    return out.getvalue()


METADATA = frame(3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
BATCH = encode_batch(0, [Record(0, 1_700_000_000_000, b"k", b"v", (("h", b"x"),)),
                         Record(1, 1_700_000_000_001, None, b"w")])
PRODUCE = codec.build(ProduceRequest, {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
    {"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}]})
PRODUCE_FRAME = frame(0, 9, PRODUCE)


def mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """``seed`` with bytes flipped, cut or inserted."""
    def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
        out = bytearray(data)
        for kind, pos, value in edits:
            if not out:
                break
            pos %= len(out)
            if kind == 0:
                out[pos] = value
            elif kind == 1:
                del out[pos:]
            else:
                out.insert(pos, value)
        return bytes(out)

    edit = st.tuples(st.integers(0, 2), st.integers(0, 10_000), st.integers(0, 255))
    return st.builds(mutate, st.just(seed), st.lists(edit, min_size=1, max_size=6))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=300), mutations(METADATA), mutations(PRODUCE_FRAME)))
def test_fuzz_frame_decoder_raises_only_frame_errors(data):
    # as bytes, and as the listener's frame reader hands frames on (a read-only view)
    for frame in (data, memoryview(bytearray(data)).toreadonly()):
        try:
            head = codec.peek_head(frame)
            low, high = SUPPORTED.get(head.api_key, (1, 0))
            if low <= head.api_version <= high:
                codec.decode_request(frame, SUPPORTED)
        except codec.FrameError:
            pass


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=300), mutations(BATCH)))
def test_fuzz_record_batch_decoder_raises_only_format_errors(data):
    try:
        decode_batches(data)
    except RecordFormatError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=50)), st.one_of(st.none(), st.binary(max_size=200)),
                          st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                                   max_size=3)),
                min_size=1, max_size=20),
       st.sampled_from(sorted(recordbatch.COMPRESSION_NAMES)))
def test_record_batch_round_trip(records, compression):
    given_records = [Record(i, 1_700_000_000_000 + i * 7, k, v, tuple(h)) for i, (k, v, h) in enumerate(records)]
    data = encode_batch(42, given_records, compression=compression, producer_id=7, producer_epoch=1,
                        base_sequence=3)
    (batch,) = decode_batches(data)
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 7, 1, 3)
    assert batch.compression == compression
    assert batch.records == given_records


def test_a_crc_mismatch_is_refused():
    broken = bytearray(BATCH)
    broken[-1] ^= 0xFF
    with pytest.raises(RecordFormatError, match="CRC"):
        decode_batches(bytes(broken))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([4, 11, 12]), st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=4))
def test_fetch_response_in_parts_is_the_same_bytes(version, records):
    """The listener writes a Fetch response's records past kio (encode_response_parts):
    the parts joined are exactly what kio writes with the records inside."""
    def payload(in_pieces=False):
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": [
            {"topic": "t", "partitions": [
                {"partition_index": i, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
                 "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1,
                 # the listener's records come as a list of parts (odd partitions here)
                 "records": [r[:len(r) // 3], memoryview(r)[len(r) // 3:]] if in_pieces and r and i % 2 else r}
                for i, r in enumerate(records)]}]}
    head = codec.RequestHead(1, version, 77, None)
    whole = codec.encode_response(head, payload())
    split = payload(in_pieces=True)
    parts = codec.encode_response_parts(head, split, list(split["responses"][0]["partitions"]))
    assert b"".join(bytes(part) for part in parts) == whole


# -- against a running listener ------------------------------------------------------------


def _send(port: int, payload: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        if not read:
            return b""
        chunks = []
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                got = b"".join(chunks)
                if len(got) >= 4 and len(got) >= 4 + struct.unpack(">i", got[:4])[0]:
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the listener's own input handling
def test_listener_survives_a_flood_of_bad_and_half_open_connections(kafka):
    port = kafka.port
    # unknown versions of known keys are answered with UNSUPPORTED_VERSION
    answer = _send(port, _framed(struct.pack(">hhi", 18, 99, 5) + b"\x00\x00"))
    assert struct.unpack(">i", answer[4:8])[0] == 5
    assert struct.unpack(">h", answer[8:10])[0] == ErrorCode.unsupported_version
    answer = _send(port, _framed(struct.pack(">hhi", 26, 5, 6) + b"\x00\x00"))  # EndTxn v5
    assert struct.unpack(">i", answer[4:8])[0] == 6
    assert ErrorCode.unsupported_version.to_bytes(2, "big") in answer[8:]
    # a key or version with no schema, or no error field to answer in: the connection is
    # closed (as Kafka does), nothing else
    assert _send(port, _framed(struct.pack(">hhi", 9999, 0, 7) + b"\x00\x00")) == b""
    assert _send(port, _framed(struct.pack(">hhi", 3, 99, 8) + b"\x00\x00")) == b""
    half_open = []
    for i in range(40):
        kind = i % 5
        if kind == 0:  # garbage after a valid length
            _send(port, _framed(bytes(range(256)) * 3), read=False)
        elif kind == 1:  # an oversized request: refused before it is read
            _send(port, struct.pack(">i", 2**31 - 1) + b"x" * 100)
        elif kind == 2:  # a negative length
            _send(port, struct.pack(">i", -5))
        elif kind == 3:  # a valid header, a truncated body
            _send(port, _framed(METADATA[:-3]), read=False)
        else:  # half a frame, then silence: the connection stays open
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(struct.pack(">i", 1000) + b"\x00\x03")
            half_open.append(s)
    # with every bad and half-open connection around, a real client still works
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("after-flood", 1)])["after-flood"].result(15)
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    p.produce("after-flood", value=b"still serving")
    assert p.flush(15) == 0
    for s in half_open:
        s.close()
    time.sleep(0.2)
    assert kafka.alive()
    assert "Traceback" not in kafka.log()  # each bad connection was refused as such, not by accident


def test_serve_refuses_non_loopback_addresses(tmp_path):  # the rule itself: test_kafka_security.py
    run = subprocess.run([sys.executable, "-m", "txn_broker.cli", "serve", "--listen", "0.0.0.0:9092"],
                         capture_output=True, text=True, timeout=60,
                         env={"TXN_BROKER_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2, run.stderr
    assert "--listen" in run.stderr
