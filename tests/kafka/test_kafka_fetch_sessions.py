"""Fetch sessions (KIP-227) through `txn-broker serve`: the protocol by hand (a full fetch
opens a session, incremental fetches send only what changed and hear only about partitions
with news, FETCH_SESSION_ID_NOT_FOUND and INVALID_FETCH_SESSION_EPOCH, epoch -1 closes),
and kafka-python, which uses sessions, consuming many partitions while records arrive."""

from __future__ import annotations

import pytest
from _kafka_listener import RawClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchResponse

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class FetchClient(RawClient):
    """Fetch v12 requests on one connection, decoded by kio."""

    def fetch(self, session_id: int, epoch: int, partitions: dict[int, int], forgotten: list[int] | None = None,
              topic: str = "s", max_wait_ms: int = 200) -> FetchResponse:
        return self.call(1, 12, {
            "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20} for p, o in partitions.items()]}]
            if partitions else [],
            "forgotten_topics_data": [{"topic": topic, "partitions": forgotten}] if forgotten else []})


def _listed(response: FetchResponse) -> dict[int, tuple[int, int]]:
    """partition -> (error code, high watermark) of every partition the answer lists."""
    return {p.partition_index: (int(p.error_code), int(p.high_watermark))
            for t in response.responses for p in t.partitions}


def _send(broker, partition: int, count: int) -> None:
    producer = broker.producer()
    producer.send("s", [{"key": None, "value": b"x", "headers": None}] * count, partition=partition)
    producer.flush()
    producer.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the listener's protocol handling
def test_fetch_sessions_by_hand(kafka, backend):
    broker = backend.connect()
    broker.create_topic("s", partitions=3)
    _send(broker, 0, 2)
    client = FetchClient(kafka.port)
    try:
        full = client.fetch(0, 0, {0: 0, 1: 0, 2: 0})
        session = int(full.session_id)
        assert full.error_code == ErrorCode.none and session != 0
        assert _listed(full) == {0: (0, 2), 1: (0, 0), 2: (0, 0)}

        # the session still fetches partition 0 from 0: its records come again
        assert _listed(client.fetch(session, 1, {})) == {0: (0, 2)}
        # partition 0 moved on (so it is sent); nothing new: no partition listed (after the long poll)
        assert _listed(client.fetch(session, 2, {0: 2})) == {}
        # records on partition 1: only it is answered
        _send(broker, 1, 3)
        assert _listed(client.fetch(session, 3, {})) == {1: (0, 3)}
        # partition 1 forgotten: records there are no news to this session any more
        _send(broker, 1, 1)
        _send(broker, 2, 1)
        assert _listed(client.fetch(session, 4, {}, forgotten=[1])) == {2: (0, 1)}
        # an offset past the log end sent for partition 0: its error is answered
        assert _listed(client.fetch(session, 5, {0: 99, 2: 1})) == {0: (ErrorCode.offset_out_of_range, 2)}

        wrong = client.fetch(session, 9, {})
        assert (wrong.error_code, wrong.session_id, wrong.responses) == (
            ErrorCode.invalid_fetch_session_epoch, 0, ())
        unknown = client.fetch(session + 1, 1, {})
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found
        # epoch -1 closes the session and answers in full, without one
        closing = client.fetch(session, -1, {0: 0})
        assert closing.error_code == ErrorCode.none and closing.session_id == 0 and _listed(closing) == {0: (0, 2)}
        assert client.fetch(session, 6, {}).error_code == ErrorCode.fetch_session_id_not_found
    finally:
        client.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_kafka_python_consumes_many_partitions_through_a_session(kafka, backend):
    partitions = 24
    broker = backend.connect()
    broker.create_topic("s", partitions=partitions)
    for p in range(partitions):
        _send(broker, p, 2)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, fetch_max_wait_ms=100, request_timeout_ms=15000)
    consumer.assign([KTP("s", p) for p in range(partitions)])
    consumer.seek_to_beginning()
    seen: list[tuple[int, int]] = []
    try:
        for round_ in range(3):
            if round_:
                for p in range(0, partitions, 5):  # a few partitions get more while it consumes
                    _send(broker, p, 1)
            expected = 2 * partitions + sum(len(range(0, partitions, 5)) for _ in range(round_))
            for _ in range(100):
                if len(seen) >= expected:
                    break
                for records in consumer.poll(timeout_ms=200).values():
                    seen += [(r.partition, r.offset) for r in records]
            assert len(seen) == expected
        assert len(set(seen)) == len(seen)
        assert sorted(seen) == sorted([(p, o) for p in range(partitions) for o in range(2)]
                                      + [(p, 2 + r) for p in range(0, partitions, 5) for r in range(2)])
        # kafka-python kept one session with the listener and went on with incremental fetches
        (handler,) = consumer._fetcher._session_handlers.values()
        assert handler.next_metadata.session_id != 0 and handler.next_metadata.epoch > 2
    finally:
        consumer.close()
