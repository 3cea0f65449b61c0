"""No request can take down the listener: requests of every API key at every supported
version (flexible ones included) are generated from kio's own schemas, their length fields
(arrays, compact arrays, strings, compact strings, bytes, unsigned varints, tagged fields)
are replaced by hostile values, and each frame is decoded in a child process
(tests/kafka/_decode_worker.py), so that a decoder that aborts fails the test rather than the
suite. Unmutated frames must decode (the length check refuses nothing valid); mutated ones
must decode or be refused, nothing else. The corpus of frames that once killed the decoder
is kept below (CORPUS), and the first of them is sent to a real `txn-broker serve`."""

from __future__ import annotations

import dataclasses
import random
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from txn_broker.kafka import SUPPORTED

WORKER = Path(__file__).with_name("_decode_worker.py")
PAIRS = [(key, version) for key, (low, high) in sorted(SUPPORTED.items()) for version in range(low, high + 1)]
FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
         "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
         "uuid": 16}

#: frames that killed the decoder (hex, without the 4-byte length prefix); each must be refused
CORPUS = [
    # issue 31: Metadata v9 whose compact topics array announces 4294967294 topics
    "0003000900000007ffff00ffffffff0f",
    # the same array length in a flexible header's tagged-field count
    "0003000900000007ffffffffffff0f",
    # Produce v9 (flexible): a compact topic_data array of 2**28 - 1 topics
    "0000000900000001ffff000000000003e880808080" + "01",
    # Fetch v12: a compact string (cluster_id tag) of 4294967294 bytes
    "0001000c00000001ffff0001000affffffff0f",
    # Metadata v4 (legacy): an array of 2**31 - 1 topics
    "00030004000000010000" + "7fffffff",
    # ApiVersions v3: the client software name announces 2**32 - 2 bytes
    "0012000300000001ffff00ffffffff0f",
]


# -- generating requests from kio's schemas --------------------------------------------------


class Encoding:
    """Bytes of a request and where its length fields are: (start, end, kind, value)."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.lengths: list[tuple[int, int, str, int]] = []

    def length(self, kind: str, value: int) -> None:
        start = len(self.out)
        size = 4 if kind == "int32" else 2
        self.out += uvarint(value) if kind == "uvarint" else value.to_bytes(size, "big", signed=True)
        self.lengths.append((start, len(self.out), kind, value))

    def embed(self, other: Encoding) -> None:
        shift = len(self.out)
        self.out += other.out
        self.lengths += [(start + shift, end + shift, kind, value) for start, end, kind, value in other.lengths]


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _primitive(enc: Encoding, rng: random.Random, kafka_type: str, flexible: bool, nullable: bool,
               legacy_string: bool = False) -> None:
    if kafka_type.startswith(("timedelta", "datetime")):  # kio refuses what datetime cannot hold
        enc.out += rng.randint(0, 10**9).to_bytes(FIXED[kafka_type], "big")
        return
    if kafka_type in FIXED:
        enc.out += bytes([rng.randint(0, 1)]) if kafka_type == "bool" else rng.randbytes(FIXED[kafka_type])
        return
    text = kafka_type == "string"
    payload = None
    if not nullable or rng.random() >= 0.2:
        size = rng.randint(0, 6)
        payload = "".join(rng.choice("abc-._é") for _ in range(size)).encode() if text else rng.randbytes(2 * size)
    if flexible and not legacy_string:
        enc.length("uvarint", 0 if payload is None else len(payload) + 1)
    else:
        enc.length("int16" if text else "int32", -1 if payload is None else len(payload))
    enc.out += payload or b""


def _entity(enc: Encoding, rng: random.Random, cls: type[Any]) -> None:
    flexible = bool(cls.__flexible__)
    tagged: list[tuple[int, Encoding]] = []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        target = enc
        if tag is not None:
            if rng.random() < 0.5:
                continue
            target = Encoding()
        kind = classify_field(field)
        legacy_string = cls.__name__ == "RequestHeader" and field.name == "client_id"
        nullable = is_optional(field) and tag is None
        if isinstance(kind, PrimitiveField):
            _primitive(target, rng, field.metadata["kafka_type"], flexible, nullable, legacy_string)
        elif isinstance(kind, EntityField):
            if nullable:
                target.out += b"\x01"
            _entity(target, rng, kind.type_)
        else:
            count = -1 if nullable and rng.random() < 0.2 else rng.randint(0, 3)
            target.length("uvarint" if flexible else "int32", count + 1 if flexible else count)
            for _ in range(max(count, 0)):
                if isinstance(kind, PrimitiveTupleField):
                    _primitive(target, rng, field.metadata["kafka_type"], flexible, False)
                else:
                    assert isinstance(kind, EntityTupleField)
                    _entity(target, rng, kind.type_)
        if tag is not None:
            tagged.append((int(tag), target))
    if not flexible:
        return
    # (kio refuses tags its schema does not know, so there are none here)
    tagged.sort(key=lambda item: item[0])
    enc.length("uvarint", len(tagged))
    for tag, value in tagged:
        enc.out += uvarint(tag)
        enc.length("uvarint", len(value.out))
        enc.embed(value)


def request(rng: random.Random, api_key: int, version: int) -> Encoding:
    """A well-formed request of ``api_key`` v``version``: header then body."""
    cls = load_request_schema(api_key, version)
    enc = Encoding()
    enc.out += struct.pack(">hhi", api_key, version, rng.randint(0, 2**31 - 1))
    client_id = None if rng.random() < 0.2 else b"fuzz"
    enc.length("int16", -1 if client_id is None else len(client_id))
    enc.out += client_id or b""
    if cls.__flexible__:
        enc.length("uvarint", 0)  # the header's tagged fields
    _entity(enc, rng, cls)
    return enc


def hostile_values(kind: str, value: int) -> list[bytes]:
    """What a length field is replaced with: the largest values of its kind, one more than
    the truth, a negative one, and (varints) an encoding longer than five bytes."""
    if kind == "uvarint":
        return [b"\xff\xff\xff\xff\x0f", uvarint(2**28 - 1), uvarint(value + 1), uvarint(value + 1000),
                b"\x80\x80\x80\x80\x80\x01", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]
    size = 4 if kind == "int32" else 2
    top = 2 ** (8 * size - 1) - 1
    return [v.to_bytes(size, "big", signed=True) for v in (top, top // 2, value + 1, -2, -(top + 1))]


def mutate(enc: Encoding, edits: list[tuple[int, int]]) -> bytes:
    """``enc`` with length fields replaced: (which length, which hostile value) pairs."""
    out = bytearray(enc.out)
    chosen = {}
    for which, value in edits:
        if enc.lengths:
            start, end, kind, truth = enc.lengths[which % len(enc.lengths)]
            options = hostile_values(kind, truth)
            chosen[start] = (end, options[value % len(options)])
    for start in sorted(chosen, reverse=True):  # from the back, so that starts stay valid
        end, replacement = chosen[start]
        out[start:end] = replacement
    return bytes(out)


# -- the child process ----------------------------------------------------------------------


class Decoder:
    """tests/kafka/_decode_worker.py, restarted after it died."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def decode(self, frames: list[bytes]) -> list[str]:
        answers: list[str] = []
        for at in range(0, len(frames), 200):  # 200 short answers fit in a pipe's buffer
            answers += self._decode(frames[at:at + 200])
        return answers

    def _decode(self, frames: list[bytes]) -> list[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.process.stdin is not None and self.process.stdout is not None
        answers = []
        try:
            self.process.stdin.write(b"".join(len(frame).to_bytes(4, "big") + frame for frame in frames))
            self.process.stdin.flush()
        except BrokenPipeError:
            pass
        for frame in frames:
            line = self.process.stdout.readline()
            if not line:
                self.process.kill()
                _, err = self.process.communicate()
                raise AssertionError(f"the decoder's process died (exit {self.process.returncode}) on "
                                     f"{frame.hex()}: {err.decode(errors='replace')[-400:]}")
            answers.append(line.decode().strip())
        return answers

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(10)


@pytest.fixture(scope="module")
def decoder():
    child = Decoder()
    yield child
    child.close()


def test_every_generated_request_decodes_and_every_hostile_length_is_refused_or_decoded(decoder):
    """Every key and version: well-formed requests decode; each length field replaced by
    each hostile value decodes or is refused, and the process survives."""
    for api_key, version in PAIRS:
        rng = random.Random(f"{api_key}/{version}")
        for _ in range(2):
            enc = request(rng, api_key, version)
            assert decoder.decode([bytes(enc.out)]) == ["decoded"], (api_key, version, enc.out.hex())
            frames = [mutate(enc, [(i, v)]) for i in range(len(enc.lengths)) for v in range(6)]
            answers = decoder.decode(frames)
            assert set(answers) <= {"decoded", "refused"}, [(f.hex(), a) for f, a in zip(frames, answers, strict=True)
                                                            if a not in ("decoded", "refused")][:3]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pair=st.sampled_from(PAIRS), seed=st.integers(0, 2**32), edits=st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 10)), min_size=1, max_size=3))
@example(pair=(3, 9), seed=0, edits=[(0, 0)])
def test_fuzz_length_fields_of_every_request(decoder, pair, seed, edits):
    enc = request(random.Random(seed), *pair)
    assert decoder.decode([mutate(enc, edits)])[0] in ("decoded", "refused")


def test_the_corpus_is_refused(decoder):
    assert decoder.decode([bytes.fromhex(frame) for frame in CORPUS]) == ["refused"] * len(CORPUS)


# -- the repro against a real listener ---------------------------------------------


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the listener's own input handling
def test_one_hostile_metadata_frame_costs_its_connection_only(kafka):
    repro = bytes.fromhex(CORPUS[0])
    frame = len(repro).to_bytes(4, "big") + repro
    assert len(frame) == 20
    assert _exchange(kafka.port, frame) == b""  # nothing answered, the connection closed
    assert kafka.alive()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("after-hostile-frame", 1)])["after-hostile-frame"].result(15)
    assert "after-hostile-frame" in admin.list_topics(timeout=15).topics
    assert kafka.alive()
    assert "Traceback" not in kafka.log()
