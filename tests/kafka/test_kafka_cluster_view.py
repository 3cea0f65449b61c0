"""Which listener coordinates a group (txn_broker/kafka/cluster_view.py), and a group's state
leaving a listener that may no longer coordinate it (groups.py): never two coordinators of
one group, even when listeners read the cluster at different moments or one wakes up from a
stop with the view it had before."""

from __future__ import annotations

import asyncio
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from txn_broker.kafka.backend import KafkaBackend, ListenerRow, ListenerTerm, Node
from txn_broker.kafka.cluster_view import GUARD_MS, LISTENER_EXPIRY_MS, SETTLE_MS, VIEW_TTL_MS, ClusterView
from txn_broker.kafka.errors import NotCoordinatorError
from txn_broker.kafka.groups import GroupCoordinator
from txn_broker.models import OffsetAndMetadata

A, B = Node(0, "127.0.0.1", 9092), Node(1, "127.0.0.1", 9093)
GROUPS = [f"group-{i}" for i in range(200)]


def test_a_view_runs_out_after_its_ttl_or_when_a_listener_in_it_could_be_taken_as_down():
    fresh = ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, 0, 60_000)], read_at=100.0)
    assert fresh.coordinators(100.0 + VIEW_TTL_MS / 1000 - 0.01) == [A, B]
    assert fresh.coordinators(100.0 + VIEW_TTL_MS / 1000) is None
    stale_b = ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, LISTENER_EXPIRY_MS - 1000, 60_000)], 100.0)
    assert stale_b.coordinators(100.9) == [A, B]
    assert stale_b.coordinators(101.0) is None  # B may be taken as down from here on
    gone_b = ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, LISTENER_EXPIRY_MS + 1, 60_000)], 100.0)
    assert gone_b.coordinators(100.0) == [A] and gone_b.listed == [A, B]


def test_a_new_term_coordinates_only_once_settled_and_nobody_does_near_that_moment():
    view = ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, 0, 1000)], read_at=100.0)
    settles = 100.0 + (SETTLE_MS - 1000) / 1000
    guard = GUARD_MS / 1000
    assert view.coordinators(100.0) == [A]
    assert view.coordinators(settles - guard + 0.01) is None
    assert view.coordinators(settles + guard - 0.01) is None
    assert view.coordinators(settles + guard) == [A, B]


def claimants(views: dict[Node, ClusterView], group: str, now: float) -> set[int]:
    """The listeners that would act as the group's coordinator at ``now``."""
    return {me.node_id for me, view in views.items()
            if (node := view.coordinator(group, now)) is not None and node.node_id == me.node_id}


def test_a_resumed_listener_and_the_one_that_took_over_never_both_coordinate_a_group():
    # A took B's groups while B was stopped; B wakes with the view from before its stop, reads
    # the cluster again (its heartbeat begins a new term) while A's last read is still without it
    b_before_stop = ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, 0, 60_000)], read_at=100.0)
    a_without_b = ClusterView([ListenerRow(A, 0, 60_000)], read_at=111.9)
    now = 112.0  # B resumes
    assert b_before_stop.coordinators(now) is None  # its view ran out while it was stopped
    b_read = ClusterView([ListenerRow(A, 100, 60_000), ListenerRow(B, 0, 0)], read_at=112.1)
    a_read = ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, 1500, 1500)], read_at=113.7)
    moments = [now + i * 0.05 for i in range(200)]
    for group in GROUPS:
        for views in ({A: a_without_b, B: b_before_stop}, {A: a_without_b, B: b_read}, {A: a_read, B: b_read}):
            for t in moments:
                assert len(claimants(views, group, t)) <= 1, (group, t)
    # once the term settled and both read again, the groups are spread over both again
    later = {A: ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, 0, 9000)], 130.0),
             B: ClusterView([ListenerRow(A, 0, 60_000), ListenerRow(B, 0, 9000)], 130.2)}
    owners = {next(iter(claimants(later, g, 130.5))) for g in GROUPS}
    assert owners == {A.node_id, B.node_id}
    assert all(later[A].coordinator(g, 130.5) == [A, B][zlib.crc32(f"group:{g}".encode()) % 2] for g in GROUPS)


def join_request(group: str, member_id: str = "") -> SimpleNamespace:
    return SimpleNamespace(group_id=group, member_id=member_id, protocol_type="consumer", group_instance_id=None,
                           protocols=[SimpleNamespace(name="range", metadata=b"")], session_timeout=6000,
                           rebalance_timeout=20000)


def test_a_group_the_listener_may_no_longer_coordinate_is_unloaded_and_its_waiting_joins_answered():
    async def scenario() -> None:
        owned = {"g": True}
        groups = GroupCoordinator(lambda group_id: owned[group_id])
        groups.start()
        try:
            first = await groups.join(join_request("g"), 5)
            assert first["error_code"] == ErrorCode.none and first["generation_id"] == 1
            # a second member joins: the rebalance waits (up to 20 s) for the first to join again
            waiting = asyncio.ensure_future(groups.join(join_request("g"), 5))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            owned["g"] = False  # the group moved (or this listener's view of the cluster ran out)
            answer = await asyncio.wait_for(waiting, 2)
            assert answer["error_code"] == ErrorCode.not_coordinator
            assert "g" not in groups.groups  # nothing left of it here: not its members, not its generation
            owned["g"] = True
            again = await groups.join(join_request("g"), 5)
            assert again["generation_id"] == 1 and again["member_id"] != first["member_id"]
        finally:
            await groups.stop()

    asyncio.run(scenario())


def test_a_rebalance_due_while_the_group_moved_completes_no_generation():
    async def scenario() -> None:
        owned = {"g": True}
        groups = GroupCoordinator(lambda group_id: owned[group_id])  # no reaper: only the deadline runs
        joining = asyncio.ensure_future(groups.join(join_request("g"), 5))
        await asyncio.sleep(0)
        owned["g"] = False  # as a listener resumed from SIGSTOP finds its due timers
        answer = await asyncio.wait_for(joining, 2)
        assert answer["error_code"] == ErrorCode.not_coordinator and "g" not in groups.groups

    asyncio.run(scenario())


def listener_term(kafka: KafkaBackend) -> ListenerTerm:
    """The term of a listener registered now (the only one: its term settles at once)."""
    node_id = kafka.register_listener("127.0.0.1", 9092, LISTENER_EXPIRY_MS, SETTLE_MS)
    (row,) = kafka.live_listeners(LISTENER_EXPIRY_MS)
    return ListenerTerm(node_id, row.started_ms, LISTENER_EXPIRY_MS)


def test_txn_offsets_checked_in_a_term_that_no_longer_holds_are_not_staged(backend):
    """A TxnOffsetCommit whose group member a coordinator checked, then written after that
    coordinator was taken as down (it was stopped between its check and its write, and a new
    term began when it came back): the write is refused, and the transaction commits only
    the offsets staged in a term that held."""
    broker = backend.connect()
    try:
        kafka = KafkaBackend(broker)
        kafka.create_topic("input", 1, {})
        term = listener_term(kafka)
        pid, epoch = kafka.init_producer_id("copier", 60_000, -1, -1)
        offsets = {("input", 0): OffsetAndMetadata(5)}
        assert kafka.txn_offset_commit("copier", pid, epoch, "copiers", offsets, term) == {}
        new_term = ListenerTerm(term.node_id, term.started_ms + 1, LISTENER_EXPIRY_MS)  # began after the check
        with pytest.raises(NotCoordinatorError):
            kafka.txn_offset_commit("copier", pid, epoch, "copiers", {("input", 0): OffsetAndMetadata(9)}, new_term)
        taken_down = ListenerTerm(term.node_id, term.started_ms, -60_000)  # its heartbeat too old by then
        with pytest.raises(NotCoordinatorError):
            kafka.txn_offset_commit("copier", pid, epoch, "copiers", {("input", 0): OffsetAndMetadata(9)}, taken_down)
        kafka.end_txn("copier", pid, epoch, True)
        assert kafka.committed("copiers", [("input", 0)])[("input", 0)].offset == 5
    finally:
        broker.close()


def test_group_offsets_checked_in_a_term_that_no_longer_holds_are_not_written(backend):
    """OffsetCommit from a group member, checked by a coordinator that was then taken as
    down before the write (stopped in between, a new term begun when it came back): nothing
    is written, so a stale coordinator cannot move a group's offsets back under the one that
    took the group over. A commit from outside any generation (no term) is written as is."""
    broker = backend.connect()
    try:
        kafka = KafkaBackend(broker)
        kafka.create_topic("input", 1, {})
        term = listener_term(kafka)
        assert kafka.commit_offsets("readers", {("input", 0): OffsetAndMetadata(7)}, term) == {}
        for stale in (ListenerTerm(term.node_id, term.started_ms + 1, LISTENER_EXPIRY_MS),  # a term begun since
                      ListenerTerm(term.node_id, term.started_ms, -60_000)):  # its heartbeat too old by then
            with pytest.raises(NotCoordinatorError):
                kafka.commit_offsets("readers", {("input", 0): OffsetAndMetadata(3)}, stale)
        assert kafka.committed("readers", [("input", 0)])[("input", 0)].offset == 7
        assert kafka.commit_offsets("readers", {("input", 0): OffsetAndMetadata(8)}) == {}
        assert kafka.committed("readers", [("input", 0)])[("input", 0)].offset == 8
    finally:
        broker.close()


def test_listeners_registering_at_once_get_distinct_node_ids(backend):
    """Listeners started together pick the next node id at once; on PostgreSQL all but one
    of them hit the primary key, and each tries again (one failed to start)."""
    brokers = [backend.connect() for _ in range(6)]
    try:
        start = threading.Barrier(len(brokers))

        def register(i: int) -> int:
            kafka = KafkaBackend(brokers[i])
            start.wait()
            return kafka.register_listener("127.0.0.1", 9100 + i, LISTENER_EXPIRY_MS, SETTLE_MS)

        with ThreadPoolExecutor(len(brokers)) as pool:
            ids = list(pool.map(register, range(len(brokers))))
        assert sorted(ids) == list(range(len(brokers)))
        # the first to register was alone: its term settled at once; the others wait theirs
        rows = KafkaBackend(brokers[0]).live_listeners(LISTENER_EXPIRY_MS)
        assert sum(r.term_ms >= SETTLE_MS for r in rows) == 1
    finally:
        for broker in brokers:
            broker.close()
