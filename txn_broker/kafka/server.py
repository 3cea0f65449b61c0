"""The Kafka-protocol listener: an asyncio server that decodes requests (kio), answers
them from :class:`~txn_broker.kafka.backend.KafkaBackend` (run in worker threads: it
blocks on the database and the object store) and encodes the responses.

Requests of one connection are answered one at a time, in order, as Kafka's brokers do.
A malformed frame, an oversized request, a client that sends half a frame and stalls, or
an API key no schema exists for costs that connection only; a known API key at a version
this listener does not support is answered with UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from ..broker import Broker
from ..errors import TxnBrokerError
from ..states import is_open
from . import codec
from .backend import KafkaBackend, Node, PreparedProduce
from .errors import error_code, for_produce
from .frames import BadFrameSize, FrameProtocol, FrameReader
from .groups import GroupCoordinator
from .recordbatch import RecordFormatError, decode_batches
from .security import MECHANISMS, SaslSession, SaslUsers

if TYPE_CHECKING:
    from ..metrics.listener import ListenerMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")
PRODUCE_KEY = 0
FETCH_KEY = 1
#: a Produce request decoded, with the batches prepared ahead of its turn
_Prepared = tuple[codec.RequestHead, Any, dict[tuple[str, int], "PreparedProduce"]]


@dataclass(frozen=True)
class _Frame:
    frame: codec.Frame
    prepared: asyncio.Task[_Prepared] | None

CLUSTER_ID = "txn-broker"
#: listeners record a heartbeat this often; one silent for LISTENER_EXPIRY_MS is taken as down
HEARTBEAT_S = 2.0
LISTENER_EXPIRY_MS = 6000
#: Kafka's socket.request.max.bytes default
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024
#: a response is written in slices of this size (see _serve_connection)
WRITE_SLICE_BYTES = 1024 * 1024
#: a request's bytes must arrive within this long once its length was read
FRAME_TIMEOUT_S = 30.0
#: a connection that sends nothing this long is closed (Kafka's connections.max.idle.ms)
IDLE_TIMEOUT_S = 600.0
#: how often the listener aborts transactions past their timeout and rolls prepared ones
#: forward (Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms is 10 s)
SWEEP_INTERVAL_S = 5.0
#: the longest a Fetch waits for data (the request's max_wait is honoured up to this)
MAX_FETCH_WAIT_S = 1.0

#: api key -> (lowest, highest) version supported; docs/kafka-protocol.md lists them
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 9),     # Produce (RecordBatch v2 only: Kafka 0.11+ clients)
    1: (4, 12),    # Fetch
    2: (1, 7),     # ListOffsets
    3: (0, 12),    # Metadata
    8: (2, 8),     # OffsetCommit
    9: (1, 7),     # OffsetFetch
    10: (0, 3),    # FindCoordinator
    11: (0, 7),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 4),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 5),    # DescribeGroups
    16: (0, 4),    # ListGroups
    17: (1, 1),    # SaslHandshake (when SASL is configured)
    18: (0, 3),    # ApiVersions
    19: (2, 7),    # CreateTopics
    20: (1, 5),    # DeleteTopics
    22: (0, 4),    # InitProducerId
    24: (0, 3),    # AddPartitionsToTxn
    25: (0, 3),    # AddOffsetsToTxn
    26: (0, 3),    # EndTxn
    28: (0, 3),    # TxnOffsetCommit
    36: (0, 2),    # SaslAuthenticate (when SASL is configured)
    65: (0, 0),    # DescribeTransactions
    66: (0, 0),    # ListTransactions
}
#: the first version of each transactional API that may answer PRODUCER_FENCED (KIP-588);
#: older versions get INVALID_PRODUCER_EPOCH, which their clients know, as from Kafka
PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}
SASL_KEYS = (17, 36)
#: what an unauthenticated connection may send when SASL is configured
BEFORE_AUTHENTICATION = (18, *SASL_KEYS)


class KafkaServer:
    """``await server.start()``, then ``await server.serve_forever()`` (or ``close()``)."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 9092, *,
                 advertised_host: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, frame_timeout_s: float = FRAME_TIMEOUT_S,
                 threads: int = 8, sasl_users: SaslUsers | None = None, tls: ssl.SSLContext | None = None,
                 sweep_interval_s: float = SWEEP_INTERVAL_S, metrics: ListenerMetrics | None = None) -> None:
        self.backend = KafkaBackend(broker)
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or host
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.groups = GroupCoordinator()
        self.sasl_users = sasl_users
        self.sweep_interval_s = sweep_interval_s
        self.node_id = 0
        self.nodes: list[Node] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.tls = tls
        self.supported = {k: v for k, v in SUPPORTED.items() if sasl_users is not None or k not in SASL_KEYS}
        self.api_keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(self.supported.items())]
        self._pool = ThreadPoolExecutor(threads, "txn-broker-kafka")
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: the listener's Prometheus metrics (serve --metrics-listen), None: none kept
        self.metrics = metrics
        if metrics is not None:
            metrics.count_connections(lambda: len(self._connections))
        self._handlers: dict[int, Callable[[codec.RequestHead, Any], Awaitable[dict[str, Any] | None]]] = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata,
            8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
            11: self.join_group, 12: self.heartbeat, 13: self.leave_group, 14: self.sync_group,
            15: self.describe_groups, 16: self.list_groups,
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics,
            22: self.init_producer_id, 24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn,
            26: self.end_txn, 28: self.txn_offset_commit, 65: self.describe_transactions,
            66: self.list_transactions,
        }

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameProtocol(FrameReader(self.max_request_bytes), self._accept), self.host, self.port,
            ssl=self.tls, ssl_handshake_timeout=self.frame_timeout_s if self.tls else None)
        self.port = self._server.sockets[0].getsockname()[1]
        self.node_id = await self._call(self.backend.register_listener, self.advertised_host, self.port)
        self.nodes = await self._call(self.backend.live_listeners, LISTENER_EXPIRY_MS)
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat())
        self.groups.start()
        if self.sweep_interval_s > 0:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        log.info("Kafka protocol listener on %s:%d", self.host, self.port)

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.groups.stop()
        for timer in (self._sweeper, self._heartbeat):
            if timer is not None:
                timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await timer
        with contextlib.suppress(TxnBrokerError):
            await self._call(self.backend.unregister_listener, self.node_id)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _beat(self) -> None:
        """Heartbeat this listener and learn which others are up."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self._call(self.backend.listener_heartbeat, self.node_id)
                self.nodes = await self._call(self.backend.live_listeners, LISTENER_EXPIRY_MS)
            except TxnBrokerError as error:
                log.warning("listener heartbeat failed: %s", error)

    def _live(self) -> list[Node]:
        """The live listeners, this one always among them, by node id."""
        nodes = {n.node_id: n for n in self.nodes}
        nodes[self.node_id] = Node(self.node_id, self.advertised_host, self.port)
        return [nodes[k] for k in sorted(nodes)]

    def _node_for(self, key: str) -> Node:
        """The listener that owns ``key`` (a group, or a topic partition), stable while the
        set of live listeners is."""
        nodes = self._live()
        return nodes[zlib.crc32(key.encode("utf-8")) % len(nodes)]

    def _leader(self, topic: str, partition: int) -> int:
        """The listener named leader of a partition: round robin from a topic's hash."""
        nodes = self._live()
        return nodes[(zlib.crc32(topic.encode("utf-8")) + partition) % len(nodes)].node_id

    def _not_coordinator(self, group_id: str) -> bool:
        return self._node_for(f"group:{group_id}").node_id != self.node_id

    async def _sweep(self) -> None:
        """The coordinator's timers, as Kafka's coordinator runs them: a transaction open
        longer than its timeout is aborted (its producer fenced), a decided one completed."""
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                for tid, txn_id in await self._call(self.backend.sweep_transactions):
                    log.info("aborted transaction %s of %r: past its timeout", txn_id, tid)
            except TxnBrokerError as error:
                log.warning("transaction sweep failed (retried in %.0f s): %s", self.sweep_interval_s, error)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(fn, *args))

    async def _try(self, fn: Callable[..., T], *args: Any,
                   code: Callable[[BaseException], ErrorCode] = error_code) -> tuple[T | None, ErrorCode]:
        """The call's result and NONE, or None and the Kafka code of the broker error."""
        try:
            return await self._call(fn, *args), ErrorCode.none
        except TxnBrokerError as error:
            log.debug("%s: %s", getattr(fn, "__name__", fn), error)
            return None, code(error)

    # -- connections -----------------------------------------------------------------------

    async def _accept(self, reader: FrameReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        # a connection cancelled at shutdown ends quietly (asyncio's stream callback would
        # log every cancelled connection task as an error)
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve_connection(reader, writer)

    async def _serve_connection(self, reader: FrameReader, writer: asyncio.StreamWriter) -> None:
        """Requests are answered one at a time, in order, as Kafka does; the next request
        is read meanwhile, and a Produce request's batches are prepared (decoded, checked,
        uploaded: nothing anyone sees) while the previous request completes."""
        peer = writer.get_extra_info("peername")
        if self.tls is None:  # drain() waits until all is sent (TLS copies into its records anyway,
            # and its transport would take a limit of 0 as always full)
            writer.transport.set_write_buffer_limits(high=0)
        session = SaslSession(self.sasl_users) if self.sasl_users is not None else None
        frames: asyncio.Queue[_Frame | BaseException | None] = asyncio.Queue(maxsize=1)
        reading = asyncio.create_task(self._read_frames(reader, frames, peer, session))
        try:
            while True:
                item = await frames.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                dispatched = self._dispatch(item.frame, peer, session, item.prepared)
                response = await (dispatched if self.metrics is None else
                                  self.metrics.observe(codec.peek_head(item.frame).api_key, dispatched))
                if response is None:
                    continue
                if isinstance(response, bytes):
                    response = [response]
                # not joined: a fetch response is megabytes of records, written as they are,
                # a slice at a time, each sent straight from it once the previous has gone
                # (the transport copies only what the socket does not take at once)
                writer.write(sum(len(part) for part in response).to_bytes(4, "big"))
                for part in response:
                    view = memoryview(part)
                    for start in range(0, len(view), WRITE_SLICE_BYTES):
                        writer.write(view[start:start + WRITE_SLICE_BYTES])
                        await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            return
        except codec.FrameError as error:
            log.warning("closing %s: %s", peer, error)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing %s after an unexpected error", peer)
        finally:
            reading.cancel()
            while not frames.empty():
                left = frames.get_nowait()
                if isinstance(left, _Frame) and left.prepared is not None:
                    self._discard_later(left.prepared)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _read_frames(self, reader: FrameReader, frames: asyncio.Queue[Any], peer: Any,
                           session: SaslSession | None) -> None:
        """Frames of the connection into ``frames`` (at most one waiting); None to close
        quietly, or the exception that ended the reading."""
        try:
            while True:
                try:
                    frame = await reader.next_frame(self.idle_timeout_s, self.frame_timeout_s)
                except BadFrameSize as bad:
                    log.warning("closing %s: request of %d bytes (allowed 8..%d)", peer, bad.size,
                                self.max_request_bytes)
                    await frames.put(None)
                    return
                item = _Frame(frame, self._prepare_ahead(frame, session))
                try:
                    await frames.put(item)
                except asyncio.CancelledError:  # the connection ended first
                    if item.prepared is not None:
                        self._discard_later(item.prepared)
                    raise
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - handed to the connection's loop
            await frames.put(error)

    def _prepare_ahead(self, frame: codec.Frame, session: SaslSession | None) -> asyncio.Task[_Prepared] | None:
        """A task preparing a Produce request's batches, None for any other frame."""
        if session is not None and not session.authenticated:
            return None
        try:
            head = codec.peek_head(frame)
        except codec.FrameError:
            return None
        supported = self.supported.get(head.api_key)
        if head.api_key != PRODUCE_KEY or supported is None or not supported[0] <= head.api_version <= supported[1]:
            return None
        return asyncio.create_task(self._prepare_produce(frame))

    async def _prepare_produce(self, frame: codec.Frame) -> _Prepared:
        """The decoded request and each partition's prepared batch, all in a worker
        thread (the event loop meanwhile reads the connections)."""
        return await self._call(self._prepare_produce_frame, frame)

    def _prepare_produce_frame(self, frame: codec.Frame) -> _Prepared:
        """:meth:`_prepare_produce`'s work: a partition that fails here is left out, to be
        produced (and its error answered) in order."""
        head, request = codec.decode_request(frame, self.supported)
        ready: dict[tuple[str, int], PreparedProduce] = {}
        for t in request.topic_data:
            for p in t.partition_data:
                key = (t.name, int(p.index))
                if key in ready:
                    continue
                try:
                    batches = decode_batches(p.records)
                    if len(batches) == 1:
                        ready[key] = self.backend.prepare_produce(t.name, int(p.index), batches[0])
                except (RecordFormatError, TxnBrokerError):
                    continue
        return head, request, ready

    def _discard_later(self, task: asyncio.Task[_Prepared]) -> None:
        """Discard a preparation's uploads once it is done, in the background (the task is
        kept referenced until then)."""
        discarding = asyncio.ensure_future(self._discard(task))
        self._connections.add(discarding)
        discarding.add_done_callback(self._connections.discard)

    async def _discard(self, task: asyncio.Task[_Prepared]) -> None:
        """Delete the objects of prepared batches that will not be committed."""
        try:
            _, _, ready = await task
        except Exception:  # noqa: BLE001 - nothing was uploaded
            return
        for prepared in ready.values():
            await self._call(self.backend.discard, prepared)

    async def _dispatch(self, frame: codec.Frame, peer: Any, session: SaslSession | None = None,
                        prepared: asyncio.Task[_Prepared] | None = None) -> bytes | list[bytes | memoryview] | None:
        head = codec.peek_head(frame)
        if session is not None and not session.authenticated and head.api_key not in BEFORE_AUTHENTICATION:
            raise codec.FrameError(f"api key {head.api_key} before SASL authentication")  # Kafka closes too
        supported = self.supported.get(head.api_key)
        if supported is None or not supported[0] <= head.api_version <= supported[1]:
            return self._unsupported(head, peer)
        if prepared is not None:
            head, request, ready = await prepared
            try:
                payload = await self.produce(head, request, ready)
            finally:
                for left in ready.values():  # a partition the request names twice
                    await self._call(self.backend.discard, left)
        else:
            head, request = codec.decode_request(frame, self.supported)
            if head.api_key in SASL_KEYS:
                assert session is not None
                answer = self._sasl(head, request, session)
                if self.metrics is not None:
                    self.metrics.answered(head.api_key, answer)
                return codec.encode_response(head, answer)
            payload = await self._handlers[head.api_key](head, request)
        if self.metrics is not None:
            self.metrics.answered(head.api_key, payload)
        if payload is None:  # acks=0
            return None
        if head.api_version < PRODUCER_FENCED_SINCE.get(head.api_key, 0):
            payload = _older_fencing_code(payload)
        if head.api_key == FETCH_KEY:  # the records are not copied through kio
            holders = [p for t in payload["responses"] for p in t["partitions"]]
            return codec.encode_response_parts(head, payload, holders)
        return codec.encode_response(head, payload)

    def _unsupported(self, head: codec.RequestHead, peer: Any) -> bytes:
        if head.api_key == codec.API_VERSIONS_KEY:
            return codec.encode_api_versions_error(head.correlation_id, self.api_keys)
        if codec.has_top_level_error(head.api_key, head.api_version):
            return codec.encode_response(head, {"error_code": ErrorCode.unsupported_version})
        # no schema to answer in (an unknown key or version), or no field for the error:
        # the connection is closed, as Kafka does
        raise codec.FrameError(f"api key {head.api_key} version {head.api_version} is not supported "
                               f"(supported: {self.api_keys})")

    # -- handlers: cluster and topics ------------------------------------------------------

    async def api_versions(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "api_keys": self.api_keys, "throttle_time": 0}

    @staticmethod
    def _sasl(head: codec.RequestHead, req: Any, session: SaslSession) -> dict[str, Any]:
        if head.api_key == 17:  # SaslHandshake
            return {"error_code": session.handshake(req.mechanism), "mechanisms": list(MECHANISMS)}
        code, message, token = session.authenticate(req.auth_bytes)
        return {"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": 0}

    @staticmethod
    def _node(node: Node) -> dict[str, Any]:
        return {"node_id": node.node_id, "host": node.host, "port": node.port, "rack": None}

    async def metadata(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        wanted = None if req.topics is None or (head.api_version == 0 and not req.topics) else \
            [t.name for t in req.topics]
        topics = []
        if wanted is None:
            infos = await self._call(self.backend.list_topics)
            found: list[tuple[str, Any, ErrorCode]] = [(i.name, i, ErrorCode.none) for i in infos]
        else:
            found = []
            for name in wanted:
                info, code = await self._try(self.backend.topic, name)
                found.append((name, info, code))
        for name, info, code in found:
            # every listener serves every partition (the data is shared); leaders are spread
            partitions = [] if info is None else [
                {"error_code": 0, "partition_index": p, "leader_id": leader, "leader_epoch": 0,
                 "replica_nodes": [leader], "isr_nodes": [leader], "offline_replicas": []}
                for p in range(info.partitions)
                for leader in [self._leader(name, p)]]
            topics.append({"error_code": code, "name": name, "is_internal": False, "partitions": partitions,
                           "topic_authorized_operations": -2147483648})
        fresh, _ = await self._try(self.backend.live_listeners, LISTENER_EXPIRY_MS)
        if fresh is not None:
            self.nodes = fresh
        nodes = self._live()
        return {"throttle_time": 0, "brokers": [self._node(n) for n in nodes], "cluster_id": CLUSTER_ID,
                "controller_id": nodes[0].node_id, "topics": topics, "cluster_authorized_operations": -2147483648}

    async def find_coordinator(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        # a group's membership lives in one listener; any listener coordinates transactions
        key_type = int(getattr(req, "key_type", 0))
        node = self._node(self._node_for(f"group:{req.key}") if key_type == 0 else self._live_self())
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                "node_id": node["node_id"], "host": node["host"], "port": node["port"]}

    def _live_self(self) -> Node:
        return Node(self.node_id, self.advertised_host, self.port)

    async def create_topics(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        results = []
        for t in req.topics:
            configs = {c.name: c.value for c in t.configs}
            info, code = await self._try(self.backend.create_topic, t.name, int(t.num_partitions), configs,
                                         bool(getattr(req, "validate_only", False)))
            results.append({"name": t.name, "error_code": code, "error_message": None if code == 0 else code.name,
                            "num_partitions": info.partitions if info else -1, "replication_factor": 1,
                            "configs": []})
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        results = []
        for name in req.topic_names:
            _, code = await self._try(self.backend.delete_topic, name)
            results.append({"name": name, "error_code": code})
        return {"throttle_time": 0, "responses": results}

    # -- handlers: produce and fetch -------------------------------------------------------

    async def produce(self, head: codec.RequestHead, req: Any,
                      ready: dict[tuple[str, int], PreparedProduce] | None = None) -> dict[str, Any] | None:
        """``ready``: batches already prepared (:meth:`_prepare_produce`), taken out of it
        as they are committed."""
        responses = []
        for t in req.topic_data:
            parts = []
            for p in t.partition_data:
                prepared = ready.pop((t.name, int(p.index)), None) if ready is not None else None
                parts.append(await self._produce_partition(t.name, int(p.index), p.records, req.transactional_id,
                                                           prepared))
            responses.append({"name": t.name, "partition_responses": parts})
        if req.acks == 0:
            return None
        return {"responses": responses, "throttle_time": 0}

    async def _produce_partition(self, topic: str, partition: int, records: bytes | None,
                                 transactional_id: str | None,
                                 prepared: PreparedProduce | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"index": partition, "base_offset": -1, "log_start_offset": -1,
                               "log_append_time": None, "record_errors": [], "error_message": None}
        try:
            if prepared is not None:
                result = await self._call(self.backend.commit_produce, prepared, transactional_id)
            else:
                try:
                    batches = decode_batches(records)
                except RecordFormatError as error:
                    return {**out, "error_code": ErrorCode.corrupt_message, "error_message": str(error)}
                if len(batches) != 1:
                    # Kafka accepts one batch per partition per request from idempotent clients
                    return {**out, "error_code": ErrorCode.invalid_record,
                            "error_message": f"{len(batches)} record batches; one per partition is expected"}
                result = await self._call(self.backend.produce, topic, partition, batches[0], transactional_id)
        except TxnBrokerError as error:
            return {**out, "error_code": for_produce(error), "error_message": str(error)[:500]}
        return {**out, "error_code": ErrorCode.none, "base_offset": result.base_offset,
                "log_start_offset": result.log_start_offset}

    async def fetch(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        isolation = int(getattr(req, "isolation_level", 0))
        max_wait = req.max_wait.total_seconds() if hasattr(req.max_wait, "total_seconds") else req.max_wait / 1000
        deadline = time.monotonic() + min(max(max_wait, 0.0), MAX_FETCH_WAIT_S)
        budget = int(getattr(req, "max_bytes", 50 * 1024 * 1024))
        delay = 0.01
        while True:
            responses, total = [], 0
            for t in req.topics:
                parts = []
                for p in t.partitions:
                    limit = max(min(int(p.partition_max_bytes), budget - total), 1)
                    got, code = await self._try(self.backend.fetch, t.topic, int(p.partition), int(p.fetch_offset),
                                                limit, isolation)
                    part: dict[str, Any] = {"partition_index": p.partition, "error_code": code,
                                            "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                            "aborted_transactions": [] if isolation == 1 else None,
                                            "preferred_read_replica": -1, "records": b""}
                    if got is not None:
                        part.update(high_watermark=got.high_watermark, last_stable_offset=got.last_stable_offset,
                                    log_start_offset=got.log_start_offset, records=got.records)
                        total += got.size
                    elif code == ErrorCode.offset_out_of_range:
                        bounds, _ = await self._try(self.backend.offsets, t.topic, int(p.partition))
                        if bounds is not None:
                            part.update(log_start_offset=bounds[0], high_watermark=bounds[1],
                                        last_stable_offset=bounds[2])
                    parts.append(part)
                responses.append({"topic": t.topic, "partitions": parts})
            errors = any(p["error_code"] for r in responses for p in r["partitions"])
            if total or errors or time.monotonic() >= deadline:
                break
            await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.1)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}

    async def list_offsets(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        isolation = int(getattr(req, "isolation_level", 0))
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                got, code = await self._try(self.backend.list_offset, t.name, int(p.partition_index),
                                            int(p.timestamp), isolation)
                offset, ts = got if got is not None else (-1, -1)
                parts.append({"partition_index": p.partition_index, "error_code": code, "timestamp": ts,
                              "offset": offset, "leader_epoch": 0})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    # -- handlers: transactions ------------------------------------------------------------

    async def init_producer_id(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        timeout = req.transaction_timeout
        timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else int(timeout)
        got, code = await self._try(self.backend.init_producer_id, req.transactional_id, timeout_ms,
                                    int(getattr(req, "producer_id", -1)), int(getattr(req, "producer_epoch", -1)))
        pid, epoch = got if got is not None else (-1, -1)
        return {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}

    async def add_partitions_to_txn(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        pairs = [(t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions]
        _, code = await self._try(self.backend.add_partitions, req.v3_and_below_transactional_id,
                                  int(req.v3_and_below_producer_id), int(req.v3_and_below_producer_epoch), pairs)
        topics = [{"name": t.name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": code} for p in t.partitions]}
            for t in req.v3_and_below_topics]
        return {"throttle_time": 0, "results_by_topic_v3_and_below": topics}

    async def add_offsets_to_txn(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        _, code = await self._try(self.backend.add_offsets, req.transactional_id, int(req.producer_id),
                                  int(req.producer_epoch), req.group_id)
        return {"throttle_time": 0, "error_code": code}

    async def txn_offset_commit(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        codes: dict[tuple[str, int], ErrorCode] = {}
        offsets: dict[tuple[str, int], int] = {}
        for t in req.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                _, codes[key] = await self._try(self.backend.check_offset, t.name, key[1], int(p.committed_offset))
                if codes[key] == ErrorCode.none:
                    offsets[key] = int(p.committed_offset)
        if offsets:
            _, code = await self._try(self.backend.txn_offset_commit, req.transactional_id, int(req.producer_id),
                                      int(req.producer_epoch), req.group_id, offsets)
            for key in offsets:
                codes[key] = code
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": codes[(t.name, int(p.partition_index))]}
                                            for p in t.partitions]} for t in req.topics]}

    async def end_txn(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        _, code = await self._try(self.backend.end_txn, req.transactional_id, int(req.producer_id),
                                  int(req.producer_epoch), bool(req.committed))
        return {"throttle_time": 0, "error_code": code}

    async def list_transactions(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        got, code = await self._try(self.backend.list_transactions, list(req.state_filters or ()))
        pids = set(req.producer_id_filters or ())
        states = [{"transactional_id": s.transactional_id, "producer_id": s.producer_id,
                   "transaction_state": s.state} for s in got or () if not pids or s.producer_id in pids]
        return {"throttle_time": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": states}

    async def describe_transactions(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        out = []
        for tid in req.transactional_ids:
            d, code = await self._try(self.backend.describe_transaction, tid)
            if d is None:
                out.append({"error_code": code, "transactional_id": tid, "transaction_state": "",
                            "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                            "producer_epoch": -1, "topics": []})
                continue
            by_topic: dict[str, list[int]] = {}
            for p in d.partitions if is_open(d.state) else ():
                by_topic.setdefault(p.topic, []).append(p.partition)
            out.append({"error_code": 0, "transactional_id": tid, "transaction_state": d.state,
                        "transaction_timeout": d.timeout_ms,
                        "transaction_start_time": d.start_ms if d.start_ms is not None else -1,
                        "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                        "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]})
        return {"throttle_time": 0, "transaction_states": out}

    # -- handlers: group offsets and membership --------------------------------------------

    async def offset_commit(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        generation = int(getattr(req, "generation_id_or_member_epoch", -1))
        group_code = self.groups.check_member(req.group_id, req.member_id, generation)
        if generation >= 0 and self._not_coordinator(req.group_id):
            group_code = ErrorCode.not_coordinator
        offsets = {(t.name, int(p.partition_index)): int(p.committed_offset) for t in req.topics for p in t.partitions}
        code = group_code
        if code == ErrorCode.none and offsets:
            _, code = await self._try(self.backend.commit_offsets, req.group_id, offsets)
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]} for t in req.topics]}

    async def offset_fetch(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        if req.topics is None:  # every partition the group has offsets for
            found, _ = await self._try(self.backend.group_partitions, req.group_id)
            wanted: list[tuple[str, int]] = found or []
        else:
            wanted = [(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
        got, code = await self._try(self.backend.committed, req.group_id, wanted)
        unstable: set[tuple[str, int]] = set()
        if getattr(req, "require_stable", False) and got is not None:
            unstable = await self._call(self.backend.pending_offsets, req.group_id, wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, p in wanted:
            part_code = code if got is None else (
                ErrorCode.unstable_offset_commit if (topic, p) in unstable else ErrorCode.none)
            by_topic.setdefault(topic, []).append({
                "partition_index": p, "committed_offset": -1 if got is None else got[(topic, p)],
                "committed_leader_epoch": -1, "metadata": "", "error_code": part_code})
        return {"throttle_time": 0, "error_code": ErrorCode.none,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    #: a group request at a listener that is not the group's coordinator
    _NOT_COORDINATOR: dict[str, Any] = {
        "throttle_time": 0, "error_code": ErrorCode.not_coordinator, "generation_id": -1,
        "protocol_type": None, "protocol_name": None, "leader": "", "member_id": "", "members": [],
        "assignment": b""}

    async def join_group(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        if self._not_coordinator(req.group_id):
            return self._NOT_COORDINATOR
        return await self.groups.join(req, head.api_version)

    async def sync_group(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        if self._not_coordinator(req.group_id):
            return self._NOT_COORDINATOR
        return await self.groups.sync(req)

    async def heartbeat(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        if self._not_coordinator(req.group_id):
            return self._NOT_COORDINATOR
        return {"throttle_time": 0,
                "error_code": self.groups.heartbeat(req.group_id, req.member_id, int(req.generation_id))}

    async def list_groups(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        """The groups with members in this listener, and those with committed offsets only."""
        states = set(getattr(req, "states_filter", ()) or ())
        listed = {g.group_id: (g.protocol_type or "consumer", g.state) for g in self.groups.groups.values()
                  if g.members}
        committed, code = await self._try(self.backend.groups_with_offsets)
        for group_id in committed or ():
            listed.setdefault(group_id, ("consumer", "Empty"))
        return {"throttle_time": 0, "error_code": code, "groups": [
            {"group_id": g, "protocol_type": t, "group_state": st} for g, (t, st) in sorted(listed.items())
            if not states or st in states]}

    async def describe_groups(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        out = []
        for group_id in req.groups:
            if self._not_coordinator(group_id):
                out.append({"error_code": ErrorCode.not_coordinator, "group_id": group_id, "group_state": "",
                            "protocol_type": "", "protocol_data": "", "members": [],
                            "authorized_operations": -2147483648})
                continue
            group = self.groups.groups.get(group_id)
            members = [] if group is None else [
                {"member_id": m.member_id, "group_instance_id": None, "client_id": "", "client_host": "",
                 "member_metadata": dict(m.protocols).get(group.protocol or "", b""),
                 "member_assignment": m.assignment} for m in group.members.values()]
            out.append({"error_code": ErrorCode.none, "group_id": group_id,
                        "group_state": group.state if group is not None and group.members else "Empty",
                        "protocol_type": (group.protocol_type if group is not None else None) or "consumer",
                        "protocol_data": (group.protocol if group is not None else None) or "",
                        "members": members, "authorized_operations": -2147483648})
        return {"throttle_time": 0, "groups": out}

    async def leave_group(self, head: codec.RequestHead, req: Any) -> dict[str, Any]:
        if self._not_coordinator(req.group_id):
            return self._NOT_COORDINATOR
        members = [m.member_id for m in req.members] if hasattr(req, "members") else [req.member_id]
        codes = [self.groups.leave(req.group_id, m) for m in members]
        return {"throttle_time": 0, "error_code": codes[0] if len(codes) == 1 else ErrorCode.none,
                "members": [{"member_id": m, "group_instance_id": None, "error_code": c}
                            for m, c in zip(members, codes, strict=True)]}


def _older_fencing_code(payload: Any) -> Any:
    """``payload`` with PRODUCER_FENCED answered as INVALID_PRODUCER_EPOCH, everywhere in it."""
    if isinstance(payload, dict):
        return {k: _older_fencing_code(v) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_older_fencing_code(v) for v in payload]
    if payload is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return payload


async def _run(server: KafkaServer, ready: Callable[[KafkaServer], None] | None) -> None:
    task = asyncio.current_task()
    if task is not None:  # SIGTERM stops the listener like Ctrl-C
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    await server.start()
    if ready is not None:
        ready(server)
    try:
        await server.serve_forever()
    finally:
        await server.close()


def serve(broker: Broker, host: str, port: int, *, ready: Callable[[KafkaServer], None] | None = None,
          **options: Any) -> None:
    """Run the listener until interrupted. ``ready`` is called once it listens."""
    server = KafkaServer(broker, host, port, **options)
    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(_run(server, ready))
