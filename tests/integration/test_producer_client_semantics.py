"""The producer's client-side rules where Kafka's client tests pin them down, on both
backends: a commit (or abort) whose outcome is unknown may only be retried, never turned
into the opposite call; ``init_transactions()`` is once per producer; an expired
transactional id is recovered as KIP-360 says, while a newer instance still fences."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pyarrow as pa
import pytest

from txn_broker import TopicPartition
from txn_broker.errors import (
    IllegalStateError,
    InvalidPidMappingError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)
from txn_broker.faults import LostReply, set_fault_hook
from txn_broker.producer import ProducerState

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])

#: every step of a commit at which its reply can be lost: the upload of its last
#: segments, before EndTxn, inside EndTxn's database transaction (rolled back: it also
#: registers those segments), after it
COMMIT_POINTS = ["produce.after_upload", "commit.before_end", "commit.during_end", "commit.after_end"]
ABORT_POINTS = ["abort.during_end", "abort.after_end"]


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    set_fault_hook(None)


@contextmanager
def failing_at(point, error=TimeoutError):
    """Every pass through ``point`` raises ``error`` until the block ends: the caller's
    request (and every retry of it) times out there."""
    hits = []

    def hook(p):
        if p == point:
            hits.append(p)
            raise error(f"injected at {p}")

    set_fault_hook(hook)
    try:
        yield hits
    finally:
        set_fault_hook(None)
    assert hits, f"{point} was never reached"


def rows(n, tag):
    return [{"k": f"{tag}{i}", "v": i} for i in range(n)]


def read_keys(broker, topic):
    consumer = broker.consumer(isolation_level="read_committed")
    consumer.subscribe([topic])
    out = []
    while batch := consumer.poll(max_records=10_000).to_pylist():
        out += [r["k"] for r in batch]
    consumer.close()
    return sorted(out)


def transitions(broker, tid):
    return [h.to_state for h in broker.describe_transaction(tid).history]


def settled(broker, topic):
    return all(p.last_stable_offset == p.high_watermark for p in broker.describe_topic(topic).partitions)


def open_transaction(broker, tid="c"):
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    broker.create_topic("in", schema=SCHEMA)
    producer = broker.producer(transactional_id=tid)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", rows(2, "a"), partition=0)
    producer.send("t", rows(2, "b"), partition=1)
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 0}, "g")
    return producer


def test_the_reproduction_of_a_lost_commit_reply_then_an_abort(backend):
    """The issue's reproduction: the commit landed, its reply was lost; the abort that used
    to strand the producer is refused locally, and the retried commit converges."""
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    p = broker.producer(transactional_id="p")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(3, "x"), partition=0)
    with failing_at("commit.after_end"), pytest.raises(TimeoutError):
        p.commit_transaction()
    assert broker.describe_transaction("p").state == "CompleteCommit"  # it did commit
    with pytest.raises(IllegalStateError, match="retry commit_transaction"):
        p.abort_transaction()
    p.commit_transaction()
    assert p.state == ProducerState.READY
    with p.transaction():
        p.send("t", rows(1, "y"), partition=0)
    assert read_keys(broker, "t") == ["x0", "x1", "x2", "y0"]


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_a_commit_with_an_unknown_outcome_is_retried_never_aborted(backend, point):
    broker = backend.connect()
    producer = open_transaction(broker)
    with failing_at(point), pytest.raises(TimeoutError):
        producer.commit_transaction()
    assert producer.state == ProducerState.COMMITTING and not producer.can_abort
    with pytest.raises(IllegalStateError, match="retry commit_transaction"):
        producer.abort_transaction()
    with pytest.raises(InvalidTxnStateError):
        producer.send("t", rows(1, "late"), partition=0)  # the transaction's content is final
    with pytest.raises(InvalidTxnStateError):
        producer.begin_transaction()
    assert producer.state == ProducerState.COMMITTING  # the refusals changed nothing

    appended = producer.commit_transaction()
    assert producer.state == ProducerState.READY
    assert sorted((a.partition, a.base_offset, a.record_count) for a in appended) == [(0, 0, 2), (1, 0, 2)]
    assert read_keys(broker, "t") == ["a0", "a1", "b0", "b1"]  # once: no duplicate, nothing lost
    history = transitions(broker, "c")
    assert history.count("PrepareCommit") == 1 and history.count("CompleteCommit") == 1
    assert "PrepareAbort" not in history
    assert broker.committed_offsets("g", [TopicPartition("in", 0)]) == {TopicPartition("in", 0): 0}

    with producer.transaction():  # usable for the next transaction
        producer.send("t", rows(1, "next"), partition=0)
    assert read_keys(broker, "t") == ["a0", "a1", "b0", "b1", "next0"]
    assert settled(broker, "t")


def test_a_commit_whose_retries_all_lost_their_reply_converges(backend):
    """A retriable error (the reply lost at every one of the producer's own retries, for
    its whole retry budget) is an unknown outcome too."""
    broker = backend.connect(retry_budget_ms=1000)
    producer = open_transaction(broker)
    with failing_at("commit.after_end", LostReply) as hits, pytest.raises(LostReply):
        producer.commit_transaction()
    # the producer retried EndTxn itself: each retry found the commit done and answered
    # success, and each answer was lost again
    assert len(hits) > 1
    assert not producer.can_abort
    producer.commit_transaction()
    assert read_keys(broker, "t") == ["a0", "a1", "b0", "b1"]
    assert transitions(broker, "c").count("CompleteCommit") == 1


@pytest.mark.parametrize("point", ABORT_POINTS)
def test_an_abort_with_an_unknown_outcome_is_retried_never_committed(backend, point):
    broker = backend.connect()
    producer = open_transaction(broker)
    producer.flush()
    with failing_at(point), pytest.raises(TimeoutError):
        producer.abort_transaction()
    assert producer.state == ProducerState.ABORTING and producer.can_abort
    with pytest.raises(IllegalStateError, match="retry abort_transaction"):
        producer.commit_transaction()
    producer.abort_transaction()
    assert producer.state == ProducerState.READY
    assert read_keys(broker, "t") == []
    assert broker.committed_offsets("g", [TopicPartition("in", 0)]) == {TopicPartition("in", 0): None}
    history = transitions(broker, "c")
    assert history.count("CompleteAbort") == 1 and "PrepareCommit" not in history
    assert settled(broker, "t")
    with producer.transaction():
        producer.send("t", rows(1, "next"), partition=0)
    assert read_keys(broker, "t") == ["next0"]


@pytest.mark.parametrize("point,committed", [("commit.during_end", False), ("commit.after_end", True)])
def test_close_after_an_unknown_commit_leaves_nothing_open(backend, point, committed):
    """A producer closed without retrying its commit ends the transaction either way: the
    abort it sends is atomic, so it aborts a commit that never landed and is refused by one
    that did. Readers are not held back until the timeout."""
    broker = backend.connect()
    producer = open_transaction(broker)
    with failing_at(point), pytest.raises(TimeoutError):
        producer.commit_transaction()
    producer.close()
    assert producer.state == ProducerState.CLOSED
    assert read_keys(broker, "t") == (["a0", "a1", "b0", "b1"] if committed else [])
    assert settled(broker, "t")
    assert broker.describe_transaction("c").state == ("CompleteCommit" if committed else "CompleteAbort")


def test_a_second_init_transactions_is_refused(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="once")
    producer.init_transactions()
    epoch = producer.epoch
    with pytest.raises(IllegalStateError, match="already initialised"):
        producer.init_transactions()
    producer.begin_transaction()
    with pytest.raises(IllegalStateError, match="already initialised"):
        producer.init_transactions()  # nor inside a transaction
    producer.send("t", rows(1, "a"), partition=0)
    producer.commit_transaction()  # the refused calls fenced nothing
    desc = broker.describe_transaction("once")
    assert desc.producer_epoch == epoch == producer.epoch and desc.state == "CompleteCommit"
    assert read_keys(broker, "t") == ["a0"]


def expire(broker, tid):
    time.sleep(0.3)
    expired = broker.expire_transactional_ids()["transactional_ids"]
    assert [a.transactional_id for a in expired] == [tid]


def test_an_expired_transactional_id_is_recovered_kip360(backend):
    broker = backend.connect(transactional_id_expiration_ms=200)
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="idler")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", rows(1, "before"), partition=0)
    old_pid = producer.producer_id
    expire(broker, "idler")

    producer.begin_transaction()
    producer.send("t", rows(1, "lost"), partition=0)  # AddPartitionsToTxn goes in the background
    with pytest.raises(InvalidPidMappingError) as raised:  # its answer comes with the next call
        producer.commit_transaction()
    assert raised.value.abortable and not raised.value.fatal and raised.value.handling == "abort"
    assert producer.state == ProducerState.ABORTABLE_ERROR
    with pytest.raises(InvalidTxnStateError, match="abort_transaction"):
        producer.commit_transaction()
    producer.abort_transaction()  # InitProducerId with the current identity: a new producer id
    assert producer.state == ProducerState.READY and producer.producer_id != old_pid

    with producer.transaction():
        producer.send("t", rows(2, "after"), partition=0)
    assert read_keys(broker, "t") == ["after0", "after1", "before0"]
    desc = broker.describe_transaction("idler")
    assert desc.state == "CompleteCommit" and desc.producer_id == producer.producer_id
    assert any("KIP-360" in (h.reason or "") for h in desc.history)


def test_kip360_recovery_through_the_offsets_call_and_the_context_manager(backend):
    """The first coordinator call of the transaction may be its offsets; ``with
    producer.transaction()`` aborts (and so recovers) on the abortable error."""
    broker = backend.connect(transactional_id_expiration_ms=200)
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="idler")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", rows(1, "before"), partition=0)
    expire(broker, "idler")
    with pytest.raises(InvalidPidMappingError), producer.transaction():
        producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "g")
    assert producer.state == ProducerState.READY
    with producer.transaction():
        producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "g")
    assert broker.committed_offsets("g", [TopicPartition("t", 0)]) == {TopicPartition("t", 0): 1}


def test_a_newer_instance_of_an_expired_id_still_fences_the_old_one(backend):
    """KIP-360's recovery is for a producer whose id nobody else holds: a zombie whose id
    expired and was taken by a newer instance is fenced (fatal)."""
    broker = backend.connect(transactional_id_expiration_ms=200)
    broker.create_topic("t", schema=SCHEMA)
    zombie = broker.producer(transactional_id="dag.task")
    zombie.init_transactions()
    with zombie.transaction():
        zombie.send("t", rows(1, "z"), partition=0)
    expire(broker, "dag.task")
    successor = broker.producer(transactional_id="dag.task")
    successor.init_transactions()
    zombie.begin_transaction()
    with pytest.raises(ProducerFencedError):  # a later send raises what the first one's add met
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            zombie.send("t", rows(1, "zombie"), partition=0)
            time.sleep(0.005)
    assert zombie.state == ProducerState.FATAL_ERROR
    with successor.transaction():
        successor.send("t", rows(1, "s"), partition=0)
    assert read_keys(broker, "t") == ["s0", "z0"]


def test_a_newer_instance_between_the_expiry_error_and_the_recovery_fences(backend):
    """The race: the old producer learnt of the expiry, a newer instance took the id, then
    the old one tries to recover."""
    broker = backend.connect(transactional_id_expiration_ms=200)
    broker.create_topic("t", schema=SCHEMA)
    late = broker.producer(transactional_id="other")
    late.init_transactions()
    with late.transaction():
        late.send("t", rows(1, "o"), partition=0)
    expire(broker, "other")
    late.begin_transaction()
    late.send("t", rows(1, "late"), partition=0)
    with pytest.raises(InvalidPidMappingError):
        late.flush()
    newer = broker.producer(transactional_id="other")
    newer.init_transactions()
    with pytest.raises(ProducerFencedError):
        late.abort_transaction()
    assert late.state == ProducerState.FATAL_ERROR
    with newer.transaction():
        newer.send("t", rows(1, "n"), partition=0)
    assert read_keys(broker, "t") == ["n0", "o0"]


def _move_sequences_back(broker, producer_id):
    """The broker's last sequence of the producer moves back behind what the producer had
    acknowledged: the producer's next append leaves a gap, refused as out of order."""
    broker._db.run(lambda tx: tx.raw("UPDATE producer_state SET last_sequence = last_sequence - 3 "
                                     "WHERE producer_id = :pid", pid=producer_id))


def test_a_refused_sequence_makes_the_transaction_abortable_then_bumps_the_epoch(backend):
    """Kafka's TransactionManagerTest.testDisallowCommitOnProduceFailure: an append refused
    with OutOfOrderSequenceError dooms the transaction, not the transactional producer; the
    abort gives it a new epoch and the next transaction commits."""
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="seq")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", rows(1, "before"), partition=0)
    pid, epoch = producer.producer_id, producer.epoch
    _move_sequences_back(broker, pid)

    producer.begin_transaction()
    producer.send("t", rows(1, "refused"), partition=0)
    with pytest.raises(OutOfOrderSequenceError) as raised:
        producer.commit_transaction()
    assert raised.value.abortable and not raised.value.fatal and raised.value.handling == "abort"
    assert producer.state == ProducerState.ABORTABLE_ERROR
    with pytest.raises(InvalidTxnStateError, match="abort_transaction"):
        producer.commit_transaction()
    producer.abort_transaction()
    assert producer.state == ProducerState.READY
    assert (producer.producer_id, producer.epoch) == (pid, epoch + 1)

    with producer.transaction():
        producer.send("t", rows(2, "after"), partition=0)
    assert read_keys(broker, "t") == ["after0", "after1", "before0"]

    # an idempotent producer has no transaction to abort: the error stays fatal for it
    idempotent = broker.producer()
    idempotent.send("t", rows(1, "i"), partition=0)
    idempotent.flush()
    _move_sequences_back(broker, idempotent.producer_id)
    idempotent.send("t", rows(1, "j"), partition=0)
    with pytest.raises(OutOfOrderSequenceError) as raised:
        idempotent.flush()
    assert raised.value.fatal and idempotent.state == ProducerState.FATAL_ERROR


def test_the_errors_at_the_next_call_example_runs(tmp_path):
    """docs/semantics.md's "Errors at the next call" example, as printed."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "semantics.md").read_text()
    section = text.split("### Errors at the next call", 1)[1].split("\n### ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    script = tmp_path / "example.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_send_does_not_wait_for_its_add_partitions(backend):
    """The lever of issue 29: AddPartitionsToTxn goes in the background, so a send returns
    while the coordinator has not answered yet; the commit waits for the answer."""
    import threading

    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="quick")
    producer.init_transactions()
    coordinator, gate, reached = broker._coordinator, threading.Event(), threading.Event()
    add_partitions = coordinator.add_partitions

    def held_add_partitions(ident, partitions):
        reached.set()
        assert gate.wait(20), "the add was never released"
        return add_partitions(ident, partitions)

    coordinator.add_partitions = held_add_partitions
    producer.begin_transaction()
    started = time.monotonic()
    producer.send("t", rows(2, "q"), partition=0)
    assert time.monotonic() - started < 10  # the send did not wait for the held add
    assert reached.wait(20)
    assert broker.describe_transaction("quick").state == "Empty"  # not answered yet
    gate.set()
    producer.commit_transaction()
    assert read_keys(broker, "t") == ["q0", "q1"]


def test_a_retriable_failure_of_a_background_add_is_raised_once_and_the_call_retried(backend):
    """An outage that outlasts the retry budget of a background AddPartitionsToTxn is
    raised, still retriable, by the next call, which leaves the producer as it was; the
    retried call registers the data, which opens the transaction itself."""
    from txn_broker.errors import DatabaseUnavailableError

    broker = backend.connect(retry_budget_ms=50)
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="outage")
    producer.init_transactions()
    coordinator = broker._coordinator
    add_partitions = coordinator.add_partitions

    def unavailable(ident, partitions):
        raise DatabaseUnavailableError("injected: the database is down for this request")

    coordinator.add_partitions = unavailable
    producer.begin_transaction()
    producer.send("t", rows(2, "o"), partition=0)
    with pytest.raises(DatabaseUnavailableError) as raised:
        producer.flush()
    assert raised.value.retriable and producer.state == ProducerState.IN_TRANSACTION
    coordinator.add_partitions = add_partitions
    producer.flush()  # the retry: the registration opens the transaction
    assert broker.describe_transaction("outage").state == "Ongoing"
    producer.commit_transaction()
    assert read_keys(broker, "t") == ["o0", "o1"]
