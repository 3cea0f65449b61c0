"""Transactions on both backends: fencing, atomicity, isolation, offsets in the
transaction, timeouts, expiry, the state machine and crash recovery."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from txn_broker import OffsetAndMetadata, TopicPartition
from txn_broker.errors import (
    InvalidPidMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    UnknownGroupError,
    UnknownTransactionalIdError,
)
from txn_broker.faults import InjectedFault, LostReply, set_fault_hook

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    set_fault_hook(None)


def rows(n, tag="x", start=0):
    return [{"k": f"{tag}{i}", "v": i} for i in range(start, start + n)]


def opened(broker, tid, timeout_s=20.0):
    """The transaction of ``tid`` once the coordinator has it open: a send's
    AddPartitionsToTxn is sent in the background (docs/semantics.md)."""
    deadline = time.monotonic() + timeout_s
    while (desc := broker.describe_transaction(tid)).state != "Ongoing":
        assert time.monotonic() < deadline, f"{tid!r} still {desc.state}"
        time.sleep(0.005)
    return desc


def read(broker, topics, isolation="read_committed"):
    consumer = broker.consumer(isolation_level=isolation)
    consumer.subscribe(topics)
    out = []
    while batch := consumer.poll(max_records=10_000).to_pylist():
        out += batch
    return out


def lso(broker, topic, partition=0):
    return broker.describe_topic(topic).partitions[partition].last_stable_offset


def test_commit_makes_records_visible_and_abort_never(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="app")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(3, "a"))
    producer.flush()  # in the log, not yet committed
    assert broker.describe_topic("t").partitions[0].high_watermark == 3
    assert lso(broker, "t") == 0
    assert read(broker, ["t"]) == []
    assert len(read(broker, ["t"], "read_uncommitted")) == 3
    producer.commit_transaction()
    assert [r["k"] for r in read(broker, ["t"])] == ["a0", "a1", "a2"]

    producer.begin_transaction()
    producer.send("t", rows(2, "b"))
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("t", rows(1, "c"))
    producer.commit_transaction()
    committed = [r["k"] for r in read(broker, ["t"])]
    assert committed == ["a0", "a1", "a2", "c0"]
    assert [r["_offset"] for r in read(broker, ["t"])] == [0, 1, 2, 5]
    assert len(read(broker, ["t"], "read_uncommitted")) == 6
    assert lso(broker, "t") == 6


def test_zombie_is_fenced(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    old = broker.producer(transactional_id="stage")
    old.init_transactions()
    old.begin_transaction()
    old.send("t", rows(2, "zombie"), partition=0)
    old.flush()

    new = broker.producer(transactional_id="stage")
    new.init_transactions()  # bumps the epoch and aborts the old instance's transaction
    assert new.epoch == old.epoch + 1
    old.send("t", rows(1, "zombie"), partition=0)  # local: its partition is in the transaction
    with pytest.raises(ProducerFencedError):  # the next call that reaches the coordinator
        old.commit_transaction()
    with pytest.raises(ProducerFencedError):  # and it stays dead
        old.begin_transaction()

    with new.transaction():
        new.send("t", rows(2, "live"), partition=1)
    keys = [r["k"] for r in read(broker, ["t"])]
    assert keys == ["live0", "live1"]


def test_zombie_with_a_new_partition_and_offsets_is_fenced(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    old = broker.producer(transactional_id="stage")
    old.init_transactions()
    old.begin_transaction()
    broker.producer(transactional_id="stage").init_transactions()
    old.send("t", rows(1), partition=1)  # AddPartitionsToTxn goes in the background
    with pytest.raises(ProducerFencedError):  # its answer is raised by the next call
        old.flush()
    with pytest.raises(ProducerFencedError):  # and the producer is finished
        old.send("t", rows(1), partition=1)
    old2 = broker.producer(transactional_id="stage2")
    old2.init_transactions()
    old2.begin_transaction()
    broker.producer(transactional_id="stage2").init_transactions()
    with pytest.raises(ProducerFencedError):
        old2.send_offsets_to_transaction({TopicPartition("t", 0): 0}, "g")


def test_context_manager_does_not_abort_when_fenced(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    old = broker.producer(transactional_id="x")
    old.init_transactions()
    new = broker.producer(transactional_id="x")
    with pytest.raises(ProducerFencedError):
        with old.transaction():
            old.send("t", rows(1))
            new.init_transactions()
            new.begin_transaction()
            new.send("t", rows(1, "new"))
            old.flush()
    # the zombie did not abort the live instance's transaction
    new.commit_transaction()
    assert [r["k"] for r in read(broker, ["t"])] == ["new0"]


def test_context_manager_aborts_on_error(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="x")
    producer.init_transactions()
    with pytest.raises(RuntimeError):
        with producer.transaction():
            producer.send("t", rows(3))
            producer.flush()
            raise RuntimeError("transform failed")
    assert read(broker, ["t"]) == [] and lso(broker, "t") == 3
    with producer.transaction():
        producer.send("t", rows(1, "ok"))
    assert [r["k"] for r in read(broker, ["t"])] == ["ok0"]


def test_atomic_across_topics_partitions_and_group_offsets(backend):
    broker = backend.connect()
    topics = ["t1", "t2", "t3"]
    for t in topics:
        broker.create_topic(t, partitions=4, schema=SCHEMA)
    broker.create_topic("input", partitions=2, schema=SCHEMA)
    seed = broker.producer()
    seed.send("input", rows(7), partition=0)
    seed.send("input", rows(3), partition=1)
    seed.flush()
    producer = broker.producer(transactional_id="multi")
    producer.init_transactions()
    offsets = {TopicPartition("input", 0): 7, TopicPartition("input", 1): 3}

    def one_transaction(tag, commit):
        producer.begin_transaction()
        for t in topics:
            for p in range(4):
                producer.send(t, rows(2, f"{tag}-{t}-{p}-"), partition=p)
        producer.send_offsets_to_transaction(offsets, "g")
        producer.flush()
        # everything is in the log, nothing visible, and no group offset yet
        assert read(broker, topics) == []
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()

    with pytest.raises(UnknownGroupError):  # the group has no offsets before the commit
        broker.describe_group("g")
    # abort: nothing ever visible, offsets discarded
    one_transaction("aborted", commit=False)
    assert read(broker, topics) == []
    consumer = broker.consumer(group_id="g")
    consumer.subscribe(["input"])
    assert consumer.committed(offsets) == {tp: None for tp in offsets}
    # commit: all 24 records and the offsets together
    one_transaction("committed", commit=True)
    got = read(broker, topics)
    assert len(got) == 24 and all(r["k"].startswith("committed") for r in got)
    assert consumer.committed(offsets) == offsets
    assert {(r["_topic"], r["_partition"]) for r in got} == {(t, p) for t in topics for p in range(4)}


def test_read_committed_stops_at_the_last_stable_offset(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    plain = broker.producer()
    txn = broker.producer(transactional_id="slow")
    txn.init_transactions()
    plain.send("t", rows(2, "before"))
    plain.flush()
    txn.begin_transaction()
    txn.send("t", rows(1, "open"))
    txn.flush()
    plain.send("t", rows(2, "after"))
    plain.flush()
    # offsets: before 0-1, open 2, after 3-4: the open transaction holds the LSO at 2
    assert lso(broker, "t") == 2
    assert [r["k"] for r in read(broker, ["t"])] == ["before0", "before1"]
    txn.commit_transaction()
    assert [r["k"] for r in read(broker, ["t"])] == ["before0", "before1", "open0", "after0", "after1"]


def test_offsets_sent_in_a_transaction_commit_with_it(backend):
    broker = backend.connect()
    broker.create_topic("in", schema=SCHEMA)
    broker.create_topic("out", schema=SCHEMA)
    seed = broker.producer()
    seed.send("in", rows(10))
    seed.flush()
    tp = TopicPartition("in", 0)
    producer = broker.producer(transactional_id="copy")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({tp: 10}, "copy")
    consumer = broker.consumer(group_id="copy")
    consumer.assign([tp])
    assert consumer.committed([tp]) == {tp: None}
    producer.commit_transaction()
    assert consumer.committed([tp]) == {tp: 10}
    assert broker.describe_group("copy").partitions[0].lag == 0


def test_commit_retried_after_a_lost_reply_succeeds_once(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="r")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(2))
    lost = []

    def lose_once(point):
        if point == "commit.after_end" and not lost:
            lost.append(point)
            raise LostReply("reply lost")

    set_fault_hook(lose_once)
    appended = producer.commit_transaction()  # the producer retries EndTxn; the retry answers success
    assert lost
    # the last segment was registered inside EndTxn: the retry answers its stored offsets
    assert [(a.partition, a.base_offset, a.record_count, a.duplicate) for a in appended] == [(0, 0, 2, True)]
    assert len(read(broker, ["t"])) == 2
    history = [h.to_state for h in broker.describe_transaction("r").history]
    assert history.count("CompleteCommit") == 1 and history.count("PrepareCommit") == 1
    # the coordinator itself: EndTxn again for the same transaction is a no-op success
    desc = broker.describe_transaction("r")
    broker._coordinator.end_transaction(producer.identity, desc.txn_id, commit=True)
    assert [h.to_state for h in broker.describe_transaction("r").history] == history


def test_a_commit_registers_its_last_segments_in_its_own_database_transaction(backend):
    """append_and_commit: the last segments get their offsets as the transaction commits.
    Again after it committed (a lost reply), it answers the stored offsets and writes
    nothing; a segment that was not part of it is refused; a fenced instance writes
    nothing."""
    from txn_broker.log.types import SegmentWrite

    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    meta = broker._topics.get("t")
    producer = broker.producer(transactional_id="last")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(2))
    txn_id = opened(broker, "last").txn_id
    assert broker.describe_topic("t").partitions[0].high_watermark == 0  # nothing registered yet
    appended = producer.commit_transaction()
    assert [(a.base_offset, a.record_count, a.duplicate) for a in appended] == [(0, 2, False)]
    ident = producer.identity
    history = [h.to_state for h in broker.describe_transaction("last").history]
    assert history[-2:] == ["PrepareCommit", "CompleteCommit"]
    stored = broker._db.run(lambda tx: tx.one("segment_by_sequence", producer_id=ident.producer_id,
                                              topic_id=meta.topic_id, partition_no=0, base_sequence=0,
                                              producer_epoch=ident.epoch), write=False)
    again = SegmentWrite(meta.topic_id, "t", 0, 2, 1, stored.object_key, 0, 0)
    answer = broker._coordinator.append_and_commit(ident, txn_id, [again])
    assert [(a.base_offset, a.record_count, a.duplicate) for a in answer] == [(0, 2, True)]
    with pytest.raises(InvalidTxnStateError):  # not part of the committed transaction
        broker._coordinator.append_and_commit(
            ident, txn_id, [SegmentWrite(meta.topic_id, "t", 0, 1, 1, "topics/stray", 1, 0)])
    producer.begin_transaction()
    producer.send("t", rows(1, "zombie"))
    broker.producer(transactional_id="last").init_transactions()  # fences it
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    assert broker.describe_topic("t").partitions[0].high_watermark == 2
    assert [h.to_state for h in broker.describe_transaction("last").history][:len(history)] == history
    assert [r["k"] for r in read(broker, ["t"])] == ["x0", "x1"]


def test_commit_is_one_database_transaction_with_both_transitions_recorded(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    producer = broker.producer(transactional_id="one")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", rows(2), partition=0)
        producer.send("t", rows(1), partition=1)
    desc = broker.describe_transaction("one")
    assert [h.to_state for h in desc.history] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    prepare, complete = desc.history[2:]
    assert (prepare.txn_id, prepare.producer_epoch) == (complete.txn_id, complete.producer_epoch) == (
        desc.txn_id, producer.epoch)
    assert [p.marker for p in desc.partitions] == ["COMMIT", "COMMIT"]
    producer.begin_transaction()
    producer.send("t", rows(1, "x"))
    producer.flush()
    producer.abort_transaction()
    assert [h.to_state for h in broker.describe_transaction("one").history][-3:] == [
        "Ongoing", "PrepareAbort", "CompleteAbort"]


def test_the_first_send_opens_the_transaction_and_adds_its_partitions(backend):
    """AddPartitionsToTxn before the first write to each partition (docs/semantics.md): the
    first send starts the transaction and its timeout clock, although the records are
    still buffered; the registration fills in the partitions' offsets."""
    broker = backend.connect()
    broker.create_topic("t", partitions=3, schema=SCHEMA)
    producer = broker.producer(transactional_id="implicit")
    producer.init_transactions()
    producer.begin_transaction()
    assert broker.describe_transaction("implicit").state == "Empty"  # begin is local only
    producer.send("t", rows(2), partition=0)
    producer.send("t", rows(2), partition=2)
    desc = opened(broker, "implicit")  # the adds go in the background, in order
    assert desc.start_ms is not None
    deadline = time.monotonic() + 20
    while len(desc.partitions) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
        desc = broker.describe_transaction("implicit")
    assert [(p.partition, p.first_offset) for p in desc.partitions] == [(0, None), (2, None)]
    results = producer.flush()
    desc = broker.describe_transaction("implicit")
    assert {r.txn_id for r in results} == {desc.txn_id}
    assert [(p.partition, p.first_offset, p.last_offset) for p in desc.partitions] == [(0, 0, 1), (2, 0, 1)]
    assert [h.to_state for h in desc.history] == ["Empty", "Ongoing"]
    producer.send("t", rows(1), partition=1)  # a partition added later in the transaction
    producer.commit_transaction()
    desc = broker.describe_transaction("implicit")
    assert [(p.partition, p.marker) for p in desc.partitions] == [(0, "COMMIT"), (1, "COMMIT"), (2, "COMMIT")]
    assert len(read(broker, ["t"])) == 5


def test_a_producer_hung_with_buffered_records_is_aborted_by_the_timeout_sweep(backend):
    """The clock starts at the first send, not at the flush: a producer that hangs before
    it flushed anything is still aborted, and fenced when it wakes up."""
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    hung = broker.producer(transactional_id="buffered", transaction_timeout_ms=1000)
    hung.init_transactions()
    hung.begin_transaction()
    hung.send("t", rows(2, "hung"))  # buffered only
    time.sleep(1.1)
    done = broker.abort_expired_transactions()
    assert [(a.transactional_id, a.epoch) for a in done] == [("buffered", 1)]
    with pytest.raises(ProducerFencedError):
        hung.commit_transaction()
    assert read(broker, ["t"], isolation="read_uncommitted") == []  # nothing was ever written


def test_appends_into_an_ended_transaction_or_from_a_stale_epoch_are_refused(backend):
    """The server-side defence: a late append of a transaction that ended, or one of a
    fenced instance, is refused under the transactional id's lock and writes nothing."""
    from txn_broker.log.types import SegmentWrite

    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    meta = broker._topics.get("t")
    producer = broker.producer(transactional_id="late")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", rows(1))
    ended = broker.describe_transaction("late").txn_id

    def late_write(seq):
        return [SegmentWrite(meta.topic_id, "t", 0, 1, 1, f"topics/late-{seq}", seq, 0)]

    with pytest.raises(InvalidTxnStateError):  # the transaction it belonged to is over
        broker._coordinator.append(producer.identity, ended, late_write(1))
    producer.begin_transaction()
    producer.send("t", rows(1, "open"))
    producer.flush()
    with pytest.raises(InvalidTxnStateError):  # another transaction is open now: still refused
        broker._coordinator.append(producer.identity, ended, late_write(2))
    zombie = producer.identity
    broker.producer(transactional_id="late").init_transactions()
    for txn_id in (None, broker.describe_transaction("late").txn_id):
        with pytest.raises(ProducerFencedError):
            broker._coordinator.append(zombie, txn_id, late_write(2))
    assert broker.describe_topic("t").partitions[0].high_watermark == 2


def test_lost_replies_of_the_first_add_partitions_and_append_are_joined_not_duplicated(backend):
    """AddPartitionsToTxn started the transaction but its reply was lost: the retry joins
    that transaction. The append's reply is lost too: its retry is stored once."""
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="lost")
    producer.init_transactions()
    producer.begin_transaction()
    coordinator = broker._coordinator
    add_partitions, append, added, sent = coordinator.add_partitions, coordinator.append, [], []

    def add_partitions_reply_lost_once(ident, partitions):
        added.append(add_partitions(ident, partitions))  # applied: the transaction is open
        if len(added) == 1:
            raise LostReply("reply lost")
        return added[-1]

    def append_reply_lost_once(ident, txn_id, writes):
        results = append(ident, txn_id, writes)
        sent.append((txn_id, [r.duplicate for r in results]))
        if len(sent) == 1:
            raise LostReply("reply lost")
        return results

    coordinator.add_partitions = add_partitions_reply_lost_once
    coordinator.append = append_reply_lost_once
    producer.send("t", rows(3))
    producer.flush()  # the producer retries the append (a commit would register in EndTxn)
    producer.commit_transaction()
    txn_id = broker.describe_transaction("lost").txn_id
    assert added == [txn_id, txn_id]
    assert sent == [(txn_id, [False]), (txn_id, [True])]
    assert [r["k"] for r in read(broker, ["t"])] == ["x0", "x1", "x2"]
    assert broker.describe_topic("t").partitions[0].high_watermark == 3
    assert [h.to_state for h in broker.describe_transaction("lost").history].count("Ongoing") == 1


def test_an_append_that_knows_no_transaction_joins_the_open_one_of_its_epoch(backend):
    """Coordinator level: an append with no transaction id (the producer never learnt it)
    joins the transaction its own instance has open; it opens one if the id is idle."""
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="joiner")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(1))
    txn_id = opened(broker, "joiner").txn_id
    producer._collect_adds(wait=True)
    producer._txn_id = None  # as if every reply of AddPartitionsToTxn had been lost
    results = producer.flush()
    assert {r.txn_id for r in results} == {txn_id}
    producer.commit_transaction()
    assert broker.describe_transaction("joiner").state == "CompleteCommit"
    assert len(read(broker, ["t"])) == 1


def test_an_append_that_may_not_begin_a_transaction_only_joins_the_open_one(backend):
    """``begin=False`` (a Kafka client's transactional produce, KIP-890): refused while the
    id has no open transaction, before and after one, writing nothing and starting none;
    joins the open one, under the same fencing as any append."""
    from txn_broker.log.types import SegmentWrite

    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    topic_id = broker._topics.get("t").topic_id
    producer = broker.producer(transactional_id="kip890")
    producer.init_transactions()
    coordinator = broker._coordinator

    def write(key, seq):
        return [SegmentWrite(topic_id, "t", 0, 1, 1, f"topics/kip890-{key}", seq, 0)]

    with pytest.raises(InvalidTxnStateError, match="AddPartitionsToTxn must come first"):
        coordinator.append(producer.identity, None, write("idle", 0), begin=False)
    assert broker.describe_transaction("kip890").state == "Empty"
    producer.begin_transaction()
    producer.send("t", rows(1))
    producer.flush()
    opened = broker.describe_transaction("kip890").txn_id
    [joined] = coordinator.append(producer.identity, None, write("joined", 1), begin=False)
    assert (joined.txn_id, joined.base_offset, joined.log_start_offset) == (opened, 1, 0)
    producer.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="AddPartitionsToTxn must come first"):
        coordinator.append(producer.identity, None, write("ended", 2), begin=False)
    zombie = producer.identity
    broker.producer(transactional_id="kip890").init_transactions()
    with pytest.raises(ProducerFencedError):
        coordinator.append(zombie, None, write("zombie", 2), begin=False)
    assert broker.describe_topic("t").partitions[0].high_watermark == 2
    assert lso(broker, "t") == 2  # both appends committed with the transaction they joined


def test_abort_after_a_failed_first_append_aborts_what_it_opened(backend):
    """An append whose answer never came may have opened the transaction at the
    coordinator: abort_transaction() must end it, not leave it holding the LSO back."""
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="unsure")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(2))
    append = broker._coordinator.append

    def append_then_fail(ident, txn_id, writes):
        append(ident, txn_id, writes)
        raise InjectedFault("the caller never learns that the append was stored")

    broker._coordinator.append = append_then_fail
    with pytest.raises(InjectedFault):
        producer.flush()
    broker._coordinator.append = append
    assert broker.describe_transaction("unsure").state == "Ongoing"
    producer.abort_transaction()
    assert broker.describe_transaction("unsure").state == "CompleteAbort"
    assert lso(broker, "t") == 2 and read(broker, ["t"]) == []


def test_illegal_calls_raise_invalid_txn_state(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="s")
    with pytest.raises(InvalidTxnStateError):
        producer.begin_transaction()  # before init
    producer.init_transactions()
    with pytest.raises(InvalidTxnStateError):
        producer.commit_transaction()  # without begin
    with pytest.raises(InvalidTxnStateError):
        producer.send("t", rows(1))  # outside a transaction
    producer.begin_transaction()
    with pytest.raises(InvalidTxnStateError):
        producer.begin_transaction()
    producer.abort_transaction()
    with pytest.raises(InvalidTxnStateError):
        producer.send("t", rows(1))  # after abort
    with pytest.raises(InvalidTxnStateError):
        broker.producer().init_transactions()


def test_timeout_above_the_maximum_is_refused(backend):
    broker = backend.connect(max_transaction_timeout_ms=1000)
    with pytest.raises(InvalidTransactionTimeoutError):
        broker.producer(transactional_id="t", transaction_timeout_ms=1001).init_transactions()
    with pytest.raises(InvalidTransactionTimeoutError):
        broker.producer(transactional_id="t", transaction_timeout_ms=0).init_transactions()
    assert broker.list_transactions() == []


def test_hung_transaction_is_aborted_by_the_timeout_sweep(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    hung = broker.producer(transactional_id="hung", transaction_timeout_ms=2000)
    hung.init_transactions()
    hung.begin_transaction()
    hung.send("t", rows(2, "hung"))
    hung.flush()
    plain = broker.producer()
    plain.send("t", rows(1, "later"))
    plain.flush()
    assert lso(broker, "t") == 0 and read(broker, ["t"]) == []
    assert [h.transactional_id for h in broker.find_hanging_transactions(older_than_ms=0)] == ["hung"]
    assert broker.abort_expired_transactions() == []  # not yet past its timeout
    time.sleep(2.1)
    hanging = broker.find_hanging_transactions()
    assert [(h.transactional_id, h.partitions) for h in hanging] == [("hung", [TopicPartition("t", 0)])]
    done = broker.abort_expired_transactions()
    assert [(a.transactional_id, a.epoch) for a in done] == [("hung", 1)]
    assert broker.abort_expired_transactions() == []  # idempotent
    assert [r["k"] for r in read(broker, ["t"])] == ["later0"]
    assert lso(broker, "t") == 3
    hung.send("t", rows(1))  # local (its partition was added): buffered
    with pytest.raises(ProducerFencedError):
        hung.commit_transaction()
    states = [h.to_state for h in broker.describe_transaction("hung").history]
    assert states[-3:] == ["PrepareEpochFence", "PrepareAbort", "CompleteAbort"]
    # a restarted instance carries on
    again = broker.producer(transactional_id="hung")
    again.init_transactions()
    with again.transaction():
        again.send("t", rows(1, "redo"))
    assert [r["k"] for r in read(broker, ["t"])] == ["later0", "redo0"]


def test_expiry_removes_only_idle_old_ids(backend):
    broker = backend.connect(transactional_id_expiration_ms=300)
    broker.create_topic("t", schema=SCHEMA)
    idle = broker.producer(transactional_id="idle")
    idle.init_transactions()
    with idle.transaction():
        idle.send("t", rows(1))
    busy = broker.producer(transactional_id="busy", transaction_timeout_ms=60_000)
    busy.init_transactions()
    busy.begin_transaction()
    busy.send("t", rows(1))
    busy.flush()
    fresh_result = broker.expire_transactional_ids()
    assert fresh_result["transactional_ids"] == []  # nothing old enough yet
    time.sleep(0.4)
    recent = broker.producer(transactional_id="recent")
    recent.init_transactions()
    result = broker.expire_transactional_ids()
    assert [a.transactional_id for a in result["transactional_ids"]] == ["idle"]
    assert {t.transactional_id for t in broker.list_transactions()} == {"busy", "recent"}
    assert broker.describe_transaction("idle").state == "Dead"
    idle.begin_transaction()
    idle.send("t", rows(1))  # its AddPartitionsToTxn, in the background, meets the expiry
    with pytest.raises(InvalidPidMappingError):  # abortable (KIP-360): see test_producer_client_semantics
        idle.flush()
    busy.commit_transaction()  # an open transaction was never expired


def test_admin_abort_fences_and_aborts(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="ad")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(2))
    producer.flush()
    action = broker.abort_transaction("ad")
    assert action.epoch == 1
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    assert read(broker, ["t"]) == [] and lso(broker, "t") == 2
    with pytest.raises(InvalidTxnStateError):
        broker.abort_transaction("ad")  # nothing open any more
    with pytest.raises(UnknownTransactionalIdError):
        broker.abort_transaction("nobody")


def test_describe_and_list(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    broker.create_topic("in", schema=SCHEMA)
    producer = broker.producer(transactional_id="dag.task")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(3), partition=1)
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 0}, "grp")
    producer.flush()
    desc = broker.describe_transaction("dag.task")
    assert desc.state == "Ongoing" and desc.producer_epoch == 0 and desc.timeout_ms == 60_000
    assert desc.start_ms and desc.last_update_ms >= desc.start_ms
    assert [(p.topic, p.partition, p.first_offset, p.last_offset) for p in desc.partitions] == [("t", 1, 0, 2)]
    assert desc.pending_offsets == [{"group_id": "grp", "topic": "in", "partition_no": 0, "committed_offset": 0}]
    assert len(desc.segments) == 1
    assert [h.to_state for h in desc.history] == ["Empty", "Ongoing"]
    assert all(h.at_ms > 0 for h in desc.history)
    listed = broker.list_transactions()
    assert [(t.transactional_id, t.state, t.partition_count, t.record_count) for t in listed] == [
        ("dag.task", "Ongoing", 1, 3)]
    assert broker.list_transactions(states=["CompleteCommit"]) == []
    producer.commit_transaction()
    assert broker.describe_transaction("dag.task").partitions[0].marker == "COMMIT"
    assert broker.list_transactions(states=["CompleteCommit"])[0].transactional_id == "dag.task"
    runs = broker.recent_transactions()
    assert runs[0]["outcome"] == "COMMIT" and runs[0]["record_count"] == 3


# every step boundary of a commit: before EndTxn, inside its database transaction (all
# written, not committed), after it; the produce points come before EndTxn too
COMMIT_POINTS = ["commit.before_end", "commit.during_end", "commit.after_end"]
ABORT_POINTS = ["abort.during_end", "abort.after_end"]


@pytest.mark.parametrize("point", ["produce.after_upload", "produce.after_register", *COMMIT_POINTS])
@pytest.mark.parametrize("recover", ["init", "sweep"])
def test_crash_during_commit_is_recovered(backend, point, recover):
    broker = backend.connect(complete_prepared_grace_ms=0)
    broker.create_topic("out", partitions=2, schema=SCHEMA)
    broker.create_topic("in", schema=SCHEMA)
    producer = broker.producer(transactional_id="crash", transaction_timeout_ms=100)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", rows(2, "a"), partition=0)
    producer.send("out", rows(2, "b"), partition=1)
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 0}, "g")

    def crash(p):
        if p == point:
            raise InjectedFault(f"crash at {p}")

    set_fault_hook(crash)
    with pytest.raises(InjectedFault):
        if point == "produce.after_register":
            # a commit registers its last segments inside EndTxn's own database transaction:
            # only data flushed before it is registered while the transaction is still open
            producer.flush()
        else:
            producer.commit_transaction()
    set_fault_hook(None)
    decided = point == "commit.after_end"
    if point == "commit.during_end":  # EndTxn's database transaction was rolled back whole
        desc = broker.describe_transaction("crash")
        assert desc.state == "Ongoing" and "PrepareCommit" not in [h.to_state for h in desc.history]
        assert [p.marker for p in desc.partitions] == [None, None]
    if recover == "init":
        successor = broker.producer(transactional_id="crash")
        successor.init_transactions()
    else:
        time.sleep(0.15)
        broker.abort_expired_transactions()
        broker.complete_prepared_transactions()
    got = sorted(r["k"] for r in read(broker, ["out"]))
    # all or nothing: a decided commit is rolled forward, anything earlier is aborted
    assert got == (["a0", "a1", "b0", "b1"] if decided else [])
    consumer = broker.consumer(group_id="g")
    assert consumer.committed([TopicPartition("in", 0)]) == {TopicPartition("in", 0): 0 if decided else None}
    assert broker.describe_transaction("crash").state in ("Empty", "CompleteCommit", "CompleteAbort")
    for p in broker.describe_topic("out").partitions:
        assert p.last_stable_offset == p.high_watermark  # nothing left hanging


@pytest.mark.parametrize("point", ABORT_POINTS)
def test_crash_during_abort_is_recovered(backend, point):
    broker = backend.connect()
    broker.create_topic("out", schema=SCHEMA)
    producer = broker.producer(transactional_id="crash", transaction_timeout_ms=100)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", rows(2))
    producer.flush()

    def crash(p):
        if p == point:
            raise InjectedFault(p)

    set_fault_hook(crash)
    with pytest.raises(InjectedFault):
        producer.abort_transaction()
    set_fault_hook(None)
    # during_end: rolled back, still Ongoing, so the timeout sweep aborts it; after_end: done
    assert broker.describe_transaction("crash").state == ("Ongoing" if point == "abort.during_end"
                                                          else "CompleteAbort")
    time.sleep(0.15)
    broker.abort_expired_transactions()
    broker.complete_prepared_transactions()
    assert read(broker, ["out"]) == []
    assert broker.describe_topic("out").partitions[0].last_stable_offset == 2
    assert broker.describe_transaction("crash").state == "CompleteAbort"


def test_crash_between_fence_and_abort_of_a_sweep(backend):
    broker = backend.connect()
    broker.create_topic("out", schema=SCHEMA)
    producer = broker.producer(transactional_id="t", transaction_timeout_ms=50)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", rows(2))
    producer.flush()
    time.sleep(0.1)

    def crash(p):
        if p == "sweep.after_fence":
            raise InjectedFault(p)

    set_fault_hook(crash)
    with pytest.raises(InjectedFault):
        broker.abort_expired_transactions()
    set_fault_hook(None)
    assert broker.describe_transaction("t").state == "PrepareEpochFence"
    with pytest.raises(ProducerFencedError):  # fenced already
        producer.commit_transaction()
    assert [a.action for a in broker.complete_prepared_transactions()] == ["completed abort"]
    assert broker.describe_transaction("t").state == "CompleteAbort"
    assert read(broker, ["out"]) == []


def test_committed_offsets_carry_metadata_and_leader_epoch(backend):
    """Offsets committed with OffsetAndMetadata, in a transaction or outside one, keep their
    metadata string and leader epoch (Kafka's OffsetAndMetadata); plain ints still work and
    ``committed_offsets`` still answers ints."""
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    seed = broker.producer()
    seed.send("t", rows(4), partition=0)
    seed.flush()
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    broker.commit_offsets("g", {tp0: OffsetAndMetadata(3, "after row 2", 7), tp1: 0})
    assert broker.committed_metadata("g", [tp0, tp1]) == {tp0: OffsetAndMetadata(3, "after row 2", 7),
                                                          tp1: OffsetAndMetadata(0, "", None)}
    assert broker.committed_offsets("g", [tp0, tp1]) == {tp0: 3, tp1: 0}
    with pytest.raises(OffsetMetadataTooLargeError):
        broker.commit_offsets("g", {tp0: OffsetAndMetadata(4, "x" * 5000)})
    with pytest.raises(OffsetOutOfRangeError):  # the Python API still checks the log's bounds
        broker.commit_offsets("g", {tp0: OffsetAndMetadata(99, "past the end")})
    assert broker.committed_metadata("g", [tp0])[tp0] == OffsetAndMetadata(3, "after row 2", 7)

    producer = broker.producer(transactional_id="meta")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({tp0: OffsetAndMetadata(4, "in a transaction", 1)}, "g")
    producer.commit_transaction()
    consumer = broker.consumer(group_id="g")
    assert consumer.committed_metadata([tp0]) == {tp0: OffsetAndMetadata(4, "in a transaction", 1)}
    assert consumer.committed([tp0]) == {tp0: 4}
    consumer.commit({tp1: OffsetAndMetadata(0, "from the consumer")})
    assert broker.committed_metadata("g", [tp1])[tp1] == OffsetAndMetadata(0, "from the consumer", None)
    consumer.close()
