"""Requests a client gave up on, on both backends, request by request (kio builds the frames).

A client that times a request out closes the connection and sends the request again, often
through another listener (any listener coordinates transactions). A stopped listener still
holds the first copy, unread, and reads it when it resumes. Run then, an EndTxn would commit
the client's next transaction and a TxnOffsetCommit would stage old offsets in it (found by
the failover test: one chunk of the output copied twice). A listener runs such a request
only if its client has not closed the connection (txn_broker/kafka/peer.py); a request whose
client still waits is run when the listener resumes, as before.

A late Produce cannot join the next transaction either: a transactional batch goes only to a
partition AddPartitionsToTxn added to the open transaction (KIP-890's check), and its
sequence number is checked against what the producer stored there.

Also: a JoinGroup error answered at a version before 7 (UNKNOWN_MEMBER_ID from a coordinator
that does not know the member, as after a group moved) is an answer, not a closed
connection."""

from __future__ import annotations

import os
import signal
import time

import pytest
from _kafka_listener import Listener, RawClient, create_topic_body, produce_body
from kio.schema.errors import ErrorCode

from txn_broker import TopicPartition
from txn_broker.kafka import SUPPORTED
from txn_broker.kafka.recordbatch import TRANSACTIONAL, Record, encode_batch

pytestmark = pytest.mark.integration

TID = "stale-copier"


def end_txn(pid: int, epoch: int, commit: bool = True) -> dict:
    return {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch, "committed": commit}


def add_partitions(pid: int, epoch: int, partition: int = 0) -> dict:
    return {"v3_and_below_transactional_id": TID, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "out", "partitions": [partition]}]}


def produce(pid: int, epoch: int, partition: int, values: list[bytes]) -> dict:
    """A transactional Produce of ``values`` (sequences from 0) to a partition of ``out``."""
    records = [Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)]
    batch = encode_batch(0, records, producer_id=pid, producer_epoch=epoch, base_sequence=0,
                         attributes=TRANSACTIONAL)
    return produce_body("out", batch, TID, partition)


def produced(answer) -> int:  # type: ignore[no-untyped-def]
    return int(answer.responses[0].partition_responses[0].error_code)


def create_out(client: RawClient, partitions: int = 1) -> None:
    assert client.call(19, 5, create_topic_body("out", partitions)).topics[0].error_code == ErrorCode.none


def txn_offsets(pid: int, epoch: int, offset: int) -> dict:
    return {"transactional_id": TID, "group_id": "copiers", "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "out", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1,
                                                        "committed_metadata": ""}]}]}


def describe(backend):  # type: ignore[no-untyped-def]
    with backend.connect() as broker:
        return broker.describe_transaction(TID, history_limit=1)


def answered(listener: Listener) -> None:
    """Once the listener answers a request on a new connection (its loop runs again), and a
    moment for the requests it read on resuming to finish."""
    client = RawClient(listener.port)
    try:
        assert client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    finally:
        client.close()
    time.sleep(1.0)


def test_a_request_whose_client_left_a_stopped_listener_is_not_run_when_it_resumes(backend, tmp_path):
    stopped_side = Listener(backend.env, tmp_path / "serve-0.log")
    live_side = Listener(backend.env, tmp_path / "serve-1.log")
    live = RawClient(live_side.port)
    try:
        create_out(live)
        init = live.call(22, 4, {"transactional_id": TID, "transaction_timeout": 60000, "producer_id": -1,
                                 "producer_epoch": -1})
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        opened = live.call(24, 3, add_partitions(pid, epoch))
        assert opened.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        first = describe(backend).txn_id

        # the listener the client used stops; the client's EndTxn and TxnOffsetCommit time out
        # there: it closes those connections and sends the EndTxn again through the other one
        given_up = [RawClient(stopped_side.port) for _ in range(2)]
        os.killpg(stopped_side.proc.pid, signal.SIGSTOP)
        try:
            given_up[0].send(28, 3, txn_offsets(pid, epoch, 1))
            given_up[1].send(26, 3, end_txn(pid, epoch))
            for client in given_up:
                client.close()
            assert live.call(26, 3, end_txn(pid, epoch)).error_code == ErrorCode.none
            # the next transaction: its partitions and offsets
            assert live.call(24, 3, add_partitions(pid, epoch)).results_by_topic_v3_and_below[0] \
                .results_by_partition[0].partition_error_code == 0
            assert live.call(28, 3, txn_offsets(pid, epoch, 2)).topics[0].partitions[0].error_code == 0
            second = describe(backend)
            assert second.txn_id != first and second.state == "Ongoing"
        finally:
            os.killpg(stopped_side.proc.pid, signal.SIGCONT)
        answered(stopped_side)

        # neither old request ran: the next transaction is still open, with its own offsets
        after = describe(backend)
        assert (after.txn_id, after.state) == (second.txn_id, "Ongoing")
        assert [o["committed_offset"] for o in after.pending_offsets] == [2]

        # a client that still waits is answered once the listener resumes
        waiting = RawClient(stopped_side.port)
        os.killpg(stopped_side.proc.pid, signal.SIGSTOP)
        try:
            correlation = waiting.send(26, 3, end_txn(pid, epoch))
            time.sleep(0.5)
        finally:
            os.killpg(stopped_side.proc.pid, signal.SIGCONT)
        assert waiting.receive(26, 3, correlation).error_code == ErrorCode.none
        waiting.close()
        done = describe(backend)
        assert (done.txn_id, done.state) == (second.txn_id, "CompleteCommit")
    finally:
        live.close()
        for listener in (stopped_side, live_side):
            listener.stop()
    assert "Traceback" not in stopped_side.log() + live_side.log()


def test_a_late_produce_does_not_join_the_next_transaction(backend, tmp_path):
    """The first transaction writes to partition 0; its Produce sits in a stopped listener
    while the client gives up, aborts, and writes its next transaction to partition 1 only.
    Read when the listener resumes, the Produce is refused: partition 0 is not in the open
    transaction. Without the check it joined that transaction and committed with it."""
    stopped_side = Listener(backend.env, tmp_path / "serve-0.log")
    live_side = Listener(backend.env, tmp_path / "serve-1.log")
    live = RawClient(live_side.port)
    try:
        create_out(live, partitions=2)
        init = live.call(22, 4, {"transactional_id": TID, "transaction_timeout": 60000, "producer_id": -1,
                                 "producer_epoch": -1})
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        assert live.call(24, 3, add_partitions(pid, epoch, 0)).results_by_topic_v3_and_below[0] \
            .results_by_partition[0].partition_error_code == 0
        given_up = RawClient(stopped_side.port)
        os.killpg(stopped_side.proc.pid, signal.SIGSTOP)
        try:
            given_up.send(0, 9, produce(pid, epoch, 0, [b"late"]))
            given_up.close()
            assert live.call(26, 3, end_txn(pid, epoch, commit=False)).error_code == ErrorCode.none
            assert live.call(24, 3, add_partitions(pid, epoch, 1)).results_by_topic_v3_and_below[0] \
                .results_by_partition[0].partition_error_code == 0
            assert produced(live.call(0, 9, produce(pid, epoch, 1, [b"next"]))) == ErrorCode.none
        finally:
            os.killpg(stopped_side.proc.pid, signal.SIGCONT)
        answered(stopped_side)
        assert live.call(26, 3, end_txn(pid, epoch)).error_code == ErrorCode.none
        ends = [TopicPartition("out", 0), TopicPartition("out", 1)]
        with backend.connect() as broker:  # nothing late was stored: partition 0 is empty
            assert broker.end_offsets(ends, "read_uncommitted") == {ends[0]: 0, ends[1]: 1}
        # a client that never added the partition is refused the same way, and told so
        assert live.call(24, 3, add_partitions(pid, epoch, 1)).results_by_topic_v3_and_below[0] \
            .results_by_partition[0].partition_error_code == 0
        assert produced(live.call(0, 9, produce(pid, epoch, 0, [b"unadded"]))) == ErrorCode.invalid_txn_state
        with backend.connect() as broker:
            assert broker.end_offsets(ends, "read_uncommitted") == {ends[0]: 0, ends[1]: 1}
    finally:
        live.close()
        for listener in (stopped_side, live_side):
            listener.stop()


def test_join_group_errors_are_answered_at_every_version(kafka):
    """UNKNOWN_MEMBER_ID (a member id the coordinator does not know) and
    INCONSISTENT_GROUP_PROTOCOL, at each JoinGroup version the listener speaks: no protocol
    was chosen, which versions before 7 write as an empty name (they have no null)."""
    low, high = SUPPORTED[11]
    client = RawClient(kafka.port)
    try:
        for version in range(low, high + 1):
            group = f"joins-v{version}"
            body = {"group_id": group, "session_timeout": 6000, "rebalance_timeout": 6000,
                    "member_id": "a-member-it-never-had", "group_instance_id": None, "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}], "reason": None}
            unknown = client.call(11, version, body)
            assert unknown.error_code == ErrorCode.unknown_member_id, version
            assert unknown.protocol_name == ("" if version < 7 else None), version
            joined = client.call(11, version, {**body, "member_id": ""})
            if joined.error_code == ErrorCode.member_id_required:  # v4+: join again with the given id
                joined = client.call(11, version, {**body, "member_id": joined.member_id})
            assert joined.error_code == ErrorCode.none, version
            other = client.call(11, version, {**body, "member_id": "", "protocol_type": "connect"})
            assert other.error_code == ErrorCode.inconsistent_group_protocol, version
    finally:
        client.close()
