"""Tagged fields the schema does not know (KIP-482): a client may add tagged fields to a
request version the listener already speaks, and the listener skips them, as Kafka's brokers
do, instead of refusing the request. Each case inserts unknown fields into one tagged
section (the header's, the body's, an array element's, an entity inside a known tagged
field) and decodes to exactly the request without them."""

from __future__ import annotations

import dataclasses
import io
import socket
import struct
import uuid

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v15.request import FetchRequest, ReplicaState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from txn_broker.kafka import SUPPORTED, codec

UNKNOWN = bytes([9, 3]) + b"abc" + bytes([200, 1, 2]) + b"xy"  # tag 9 (3 bytes), tag 200 (2 bytes)


def _encode(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _frame(api_key: int, version: int, body: object) -> tuple[bytes, int]:
    header = _encode(RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=7,
                                   client_id="tags"))
    return header + _encode(body), len(header)


def _with_unknown(data: bytes, count_at: int) -> bytes:
    """``data`` with the two UNKNOWN fields added to the tagged section whose count (0, one
    byte) is at ``count_at``."""
    assert data[count_at] == 0
    return data[:count_at] + bytes([2]) + UNKNOWN + data[count_at + 1:]


def _decoded(data: bytes) -> tuple[object, object]:
    # the decoder itself, for every version kio has (the listener answers Fetch up to v12)
    head, body = codec.decode_request(data, {**SUPPORTED, 1: (4, 15)})
    return head, body


def test_unknown_tagged_fields_of_the_header_and_the_body_are_skipped():
    frame, header_len = _frame(18, 3, ApiVersionsRequest(client_software_name="c", client_software_version="1"))
    expected = _decoded(frame)
    assert _decoded(_with_unknown(frame, header_len - 1)) == expected  # the header's section
    assert _decoded(_with_unknown(frame, len(frame) - 1)) == expected  # the body's
    both = _with_unknown(_with_unknown(frame, len(frame) - 1), header_len - 1)
    assert _decoded(both) == expected
    # as the listener's frame reader hands frames on: a read-only view
    assert _decoded(memoryview(bytearray(both)).toreadonly()) == expected  # type: ignore[arg-type]


def test_unknown_tagged_fields_of_array_elements_are_skipped():
    topics = (MetadataRequestTopic(topic_id=uuid.UUID(int=1), name="first"),
              MetadataRequestTopic(topic_id=uuid.UUID(int=2), name="second"))
    frame, header_len = _frame(3, 12, MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=True))
    expected = _decoded(frame)
    first_end = header_len + 1 + 16 + 1 + len("first")  # array count, uuid, compact name
    second_end = first_end + 1 + 16 + 1 + len("second")
    mutated = _with_unknown(_with_unknown(frame, second_end), first_end)
    assert _decoded(mutated) == expected
    assert _decoded(_with_unknown(mutated, len(mutated) - 1)) == expected


def test_unknown_tagged_fields_inside_a_known_tagged_field_shrink_its_size():
    # Fetch v15's replica_state (tag 1) is an entity with its own tagged fields
    state = ReplicaState(replica_id=424242, replica_epoch=171717)
    body = codec.build(FetchRequest, {"cluster_id": "cluster-x", "max_wait": 500, "min_bytes": 1,
                                      "max_bytes": 1 << 20, "isolation_level": 1, "session_id": 0,
                                      "session_epoch": -1, "topics": [], "forgotten_topics_data": [],
                                      "rack_id": ""})
    body = dataclasses.replace(body, replica_state=state)
    frame, _ = _frame(1, 15, body)
    expected = _decoded(frame)
    assert expected[1].replica_state == state and expected[1].cluster_id == "cluster-x"
    inner = _encode(state)
    at = frame.index(inner)
    assert frame[at - 2:at] == bytes([1, len(inner)])  # tag 1, its size
    grown = _with_unknown(inner, len(inner) - 1)
    mutated = frame[:at - 1] + bytes([len(grown)]) + grown + frame[at + len(inner):]
    assert _decoded(mutated) == expected
    # and two unknown fields beside the two known ones in the body's own section
    section = bytes([2, 0, len("cluster-x") + 1, len("cluster-x") + 1]) + b"cluster-x"  # count, tag, size, string
    at = mutated.index(section)
    assert _decoded(mutated[:at] + bytes([4]) + UNKNOWN + mutated[at + 1:]) == expected


def test_an_unknown_tagged_field_longer_than_the_frame_is_refused():
    frame, _ = _frame(18, 3, ApiVersionsRequest(client_software_name="c", client_software_version="1"))
    bad = frame[:-1] + bytes([1, 9, 100]) + b"short"
    with pytest.raises(codec.FrameError, match="tagged field 9"):
        codec.decode_request(bad, SUPPORTED)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the listener's own input handling
def test_the_listener_answers_a_request_with_unknown_tagged_fields(kafka):
    frame, header_len = _frame(18, 3, ApiVersionsRequest(client_software_name="c", client_software_version="1"))
    mutated = _with_unknown(_with_unknown(frame, len(frame) - 1), header_len - 1)
    with socket.create_connection(("127.0.0.1", kafka.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(mutated)) + mutated)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        answer = s.recv(size, socket.MSG_WAITALL)
    assert struct.unpack(">i", answer[:4])[0] == 7  # the correlation id
    assert struct.unpack(">h", answer[4:6])[0] == 0  # ApiVersions' error code: none
    assert kafka.alive()
