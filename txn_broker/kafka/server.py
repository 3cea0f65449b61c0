"""The Kafka-protocol listener: an asyncio server that reads each connection's frames,
decodes its requests (kio), dispatches each to its API's handler (``apis/``, one module per
API or small group of APIs, found through ``apis.HANDLERS``) and writes the responses. The
handlers answer from :class:`~txn_broker.kafka.backend.KafkaBackend`, run in worker threads
(:meth:`KafkaServer.call`: it blocks on the database and the object store), after asking
the authoriser (``authorizer.py``).

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
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from ..broker import Broker
from ..errors import TxnBrokerError
from . import codec
from .acls import AclAuthorizer
from .apis import HANDLERS, SUPPORTED, RequestContext
from .apis.fetch import FETCH_KEY
from .apis.produce import produce
from .apis.sasl import SASL_KEYS
from .apis.transactions import PRODUCER_FENCED_SINCE
from .authorizer import Authorizer
from .backend import AclStore, KafkaBackend, ListenerRow, ListenerTerm, Node, PreparedProduce
from .cluster_view import LISTENER_EXPIRY_MS, SETTLE_MS, ClusterView
from .errors import error_code
from .fetch_sessions import DEFAULT_SLOTS, FetchSessionCache
from .frames import BadFrameSize, FrameProtocol, FrameReader
from .groups import GroupCoordinator
from .limits import ListenerLimits
from .peer import PeerProbe
from .recordbatch import RecordFormatError, decode_batches
from .security import SaslSession, SaslUsers

if TYPE_CHECKING:
    from ..metrics.listener import ListenerMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")
PRODUCE_KEY = 0
#: a Produce request decoded, with the batches prepared ahead of its turn
_Prepared = tuple[codec.RequestHead, Any, dict[tuple[str, int], "PreparedProduce"]]


@dataclass(frozen=True)
class _Frame:
    frame: codec.Frame
    prepared: asyncio.Task[_Prepared] | None

#: listeners record a heartbeat this often; one silent for LISTENER_EXPIRY_MS is taken as down
#: (cluster_view.py: which listener coordinates which group, and when that is safe to act on)
HEARTBEAT_S = 2.0
#: a listener taken as down stays in Metadata's list of brokers this long (leading no
#: partition, coordinating no group). librdkafka's coordinator requests (TxnOffsetCommit of
#: send_offsets_to_transaction, the admin client's group requests) wait on the broker they
#: were named and ask again only when its connection attempts fail: once the broker leaves
#: the metadata no attempt is made, and the request never ends.
LISTENER_LISTED_MS = 60000
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
#: what an unauthenticated connection may send when SASL is configured
BEFORE_AUTHENTICATION = (18, *SASL_KEYS)


class KafkaServer:
    """``await server.start()``, then ``await server.serve_forever()`` (or ``close()``)."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 9092, *,
                 advertised_host: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, frame_timeout_s: float = FRAME_TIMEOUT_S,
                 threads: int = 8, sasl_users: SaslUsers | None = None, tls: ssl.SSLContext | None = None,
                 sweep_interval_s: float = SWEEP_INTERVAL_S, limits: ListenerLimits | None = None,
                 auto_create_topics: int = 0, metrics: ListenerMetrics | None = None,
                 super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 fetch_session_slots: int = DEFAULT_SLOTS) -> None:
        self.backend = KafkaBackend(broker)
        #: Fetch sessions (KIP-227), at most ``fetch_session_slots`` (Kafka's
        #: max.incremental.fetch.session.cache.slots; 0: none, every fetch is a full one)
        self.fetch_sessions = FetchSessionCache(fetch_session_slots)
        self.acl_store = AclStore(broker)
        #: Metadata creates a topic it is asked for with this many partitions (0: never)
        self.auto_create_topics = auto_create_topics
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or host
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.limits = limits or ListenerLimits()  # memory and connections (kafka/limits.py)
        self.groups = GroupCoordinator(lambda group_id: not self.not_coordinator(group_id))
        self.sasl_users = sasl_users
        self.sweep_interval_s = sweep_interval_s
        self.node_id = 0
        #: the cluster as last read: the live listeners, those also listed in Metadata (down
        #: for less than LISTENER_LISTED_MS), and who coordinates which group
        self.view = ClusterView.empty()
        self._heartbeat: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.tls = tls
        # ACLs are enforced once clients authenticate (SASL): without it every client is
        # User:ANONYMOUS and may do everything, as a Kafka broker without an authoriser
        self.authorizer: Authorizer = AclAuthorizer(super_users, allow_everyone_if_no_acl_found) \
            if sasl_users is not None else Authorizer()
        self.supported = {k: v for k, v in SUPPORTED.items() if sasl_users is not None or k not in SASL_KEYS}
        self.api_keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(self.supported.items())]
        self._pool = ThreadPoolExecutor(threads, "txn-broker-kafka")
        # the heartbeat and its read of the cluster have a thread of their own: queued behind
        # slow requests, they would let this listener's view of the cluster run out
        self._cluster_pool = ThreadPoolExecutor(1, "txn-broker-kafka-cluster")
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: the listener's Prometheus metrics (serve --metrics-listen), None: none kept
        self.metrics = metrics
        if metrics is not None:
            metrics.count_connections(lambda: len(self._connections))

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameProtocol(FrameReader(self.max_request_bytes, limits=self.limits), self._accept, self.limits),
            self.host, self.port,
            ssl=self.tls, ssl_handshake_timeout=self.frame_timeout_s if self.tls else None)
        self.port = self._server.sockets[0].getsockname()[1]
        self.node_id = await self.call(self.backend.register_listener, self.advertised_host, self.port,
                                       LISTENER_EXPIRY_MS, SETTLE_MS)
        await self._read_nodes()
        await self.refresh_acls()
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
            await self.call(self.backend.unregister_listener, self.node_id)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._cluster_pool.shutdown(wait=False, cancel_futures=True)

    async def _beat(self) -> None:
        """Heartbeat this listener and learn which others are up."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self._cluster_pool, self.backend.listener_heartbeat, self.node_id, LISTENER_EXPIRY_MS, SETTLE_MS)
                await self._read_nodes()
                await self.refresh_acls()  # changes made through another listener or the CLI
            except TxnBrokerError as error:
                log.warning("listener heartbeat failed: %s", error)

    async def _read_nodes(self) -> None:
        """Read the cluster's listeners (raises the database's error)."""
        read_at = time.monotonic()
        found = await asyncio.get_running_loop().run_in_executor(
            self._cluster_pool, self.backend.live_listeners, LISTENER_LISTED_MS)
        self._learn_nodes(found, read_at)

    def _learn_nodes(self, found: list[ListenerRow], read_at: float) -> None:
        if read_at >= self.view.read_at:  # an older read finishing late is not taken
            self.view = ClusterView(found, read_at)

    def live(self) -> list[Node]:
        """The live listeners, this one always among them, by node id."""
        nodes = {n.node_id: n for n in self.view.live}
        nodes[self.node_id] = self.self_node()
        return [nodes[k] for k in sorted(nodes)]

    def coordinator(self, group_id: str) -> Node | None:
        """The listener coordinating ``group_id`` now, as far as this one may tell (None:
        none may be named now; see cluster_view.py)."""
        return self.view.coordinator(group_id, time.monotonic())

    def leader(self, topic: str, partition: int) -> int:
        """The listener named leader of a partition: round robin from a topic's hash."""
        nodes = self.live()
        return nodes[(zlib.crc32(topic.encode("utf-8")) + partition) % len(nodes)].node_id

    def coordinator_term(self, group_id: str) -> ListenerTerm | None:
        """This listener's term if it may act as the group's coordinator now, else None."""
        if self.not_coordinator(group_id):
            return None
        started_ms = self.view.started_ms(self.node_id)
        return None if started_ms is None else ListenerTerm(self.node_id, started_ms, LISTENER_EXPIRY_MS)

    def not_coordinator(self, group_id: str) -> bool:
        """Whether this listener may not act as the group's coordinator now."""
        node = self.coordinator(group_id)
        return node is None or node.node_id != self.node_id

    async def refresh_acls(self) -> None:
        """Read the cluster's ACLs again (when they are enforced)."""
        if isinstance(self.authorizer, AclAuthorizer):
            self.authorizer.load(await self.call(self.acl_store.find))

    def self_node(self) -> Node:
        return Node(self.node_id, self.advertised_host, self.port)

    async def refresh_nodes(self) -> list[Node]:
        """The brokers Metadata lists, read afresh (the heartbeat's list if the database is
        not answering): the live listeners, then those down for less than LISTENER_LISTED_MS."""
        read_at = time.monotonic()
        fresh, _ = await self.attempt(self.backend.live_listeners, LISTENER_LISTED_MS)
        if fresh is not None:
            self._learn_nodes(fresh, read_at)
        live = self.live()
        ids = {n.node_id for n in live}
        return live + [n for n in self.view.listed if n.node_id not in ids]

    async def _sweep(self) -> None:
        """The coordinator's timers, as Kafka's coordinator runs them: a transaction open
        longer than its timeout is aborted (its producer fenced), a decided one completed."""
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                for tid, txn_id in await self.call(self.backend.sweep_transactions):
                    log.info("aborted transaction %s of %r: past its timeout", txn_id, tid)
            except TxnBrokerError as error:
                log.warning("transaction sweep failed (retried in %.0f s): %s", self.sweep_interval_s, error)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(fn, *args))

    async def attempt(self, fn: Callable[..., T], *args: Any,
                   code: Callable[[BaseException], ErrorCode] = error_code) -> tuple[T | None, ErrorCode]:
        """The call's result and NONE, or None and the Kafka code of the broker error."""
        try:
            return await self.call(fn, *args), ErrorCode.none
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
        probe = PeerProbe(reader, writer.get_extra_info("socket"))
        frames: asyncio.Queue[_Frame | BaseException | None] = asyncio.Queue(maxsize=1)
        reading = asyncio.create_task(self._read_frames(reader, frames, peer, session))
        try:
            while True:
                item = await frames.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                dispatched = self._dispatch(item.frame, peer, session, item.prepared, probe)
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
        return await self.call(self._prepare_produce_frame, frame)

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
            await self.call(self.backend.discard, prepared)

    async def _dispatch(self, frame: codec.Frame, peer: Any, session: SaslSession | None = None,
                        prepared: asyncio.Task[_Prepared] | None = None,
                        probe: PeerProbe | None = None) -> bytes | list[bytes | memoryview] | None:
        if session is not None and session.bare_tokens and not session.authenticated:
            # after SaslHandshake v0: a bare token, answered bare; a failure closes, as in Kafka
            code, message, token = session.authenticate(bytes(frame))
            if code != ErrorCode.none:
                raise codec.FrameError(f"SASL authentication failed: {message}")
            return token
        head = codec.peek_head(frame)
        if session is not None and not session.authenticated and head.api_key not in BEFORE_AUTHENTICATION:
            raise codec.FrameError(f"api key {head.api_key} before SASL authentication")  # Kafka closes too
        supported = self.supported.get(head.api_key)
        if supported is None or not supported[0] <= head.api_version <= supported[1]:
            return self._unsupported(head, peer)
        if prepared is not None:
            head, request, ready = await prepared
            ctx = RequestContext(head, peer, session, ready, probe)
            try:
                payload = await produce(self, ctx, request)
            finally:
                for left in ready.values():  # a partition the request names twice
                    await self.call(self.backend.discard, left)
        else:
            head, request = codec.decode_request(frame, self.supported)
            payload = await HANDLERS[head.api_key].handler(self, RequestContext(head, peer, session, probe=probe),
                                                           request)
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
