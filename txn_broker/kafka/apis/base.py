"""What every API module shares: the request's context and an API's entry in the
listener's table (its key, name, versions and handler)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from .. import codec
from ..authorizer import Authorizer, Operation, Principal, ResourceType
from ..backend import AclStore, KafkaBackend, ListenerTerm, Node, PreparedProduce
from ..fetch_sessions import FetchSessionCache
from ..groups import GroupCoordinator
from ..peer import PeerProbe
from ..security import SaslSession

T = TypeVar("T")


class Listener(Protocol):
    """What a handler uses of the listener (server.KafkaServer)."""

    backend: KafkaBackend
    groups: GroupCoordinator
    authorizer: Authorizer
    api_keys: list[dict[str, int]]
    auto_create_topics: int
    acl_store: AclStore
    fetch_sessions: FetchSessionCache

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread (it blocks on the database or the store)."""
        ...

    async def attempt(self, fn: Callable[..., T], *args: Any) -> tuple[T | None, ErrorCode]:
        """:meth:`call`'s result and NONE, or None and the Kafka code of the broker error."""
        ...

    def leader(self, topic: str, partition: int) -> int: ...

    def coordinator_term(self, group_id: str) -> ListenerTerm | None:
        """This listener's term if it may act as the group's coordinator now, else None."""
        ...

    def coordinator(self, group_id: str) -> Node | None:
        """The listener coordinating the group now (None: none may be named now)."""
        ...

    def self_node(self) -> Node: ...

    def not_coordinator(self, group_id: str) -> bool: ...

    async def refresh_nodes(self) -> list[Node]:
        """Metadata's brokers: the live listeners first, then those recently down."""
        ...

    async def refresh_acls(self) -> None: ...


@dataclass
class RequestContext:
    """One request as its handler sees it, besides the decoded body."""

    head: codec.RequestHead
    #: the client's address as the socket gives it (host, port, ...), or None
    peer: Any
    session: SaslSession | None = None
    #: Produce: batches prepared ahead of the request's turn, taken out as they are committed
    ready: dict[tuple[str, int], PreparedProduce] = field(default_factory=dict)
    #: whether the client still waits for the answer (None: not known, taken as waiting)
    probe: PeerProbe | None = None

    def client_waits(self, tx: Any = None) -> None:
        """A database check (run after the transactional id's lock): ClientGoneError if the
        client closed the connection, so a request it gave up on and sent again elsewhere
        is not run late (kafka/peer.py)."""
        if self.probe is not None:
            self.probe.check()

    @property
    def version(self) -> int:
        return self.head.api_version

    @property
    def client_host(self) -> str:
        return str(self.peer[0]) if isinstance(self.peer, tuple) and self.peer else ""

    @property
    def principal(self) -> Principal:
        user = self.session.user if self.session is not None and self.session.authenticated else None
        return Principal.of(user, self.client_host)


Payload = dict[str, Any]
Handler = Callable[[Listener, RequestContext, Any], Awaitable[Payload | None]]


@dataclass(frozen=True)
class Api:
    """A Kafka API the listener answers: ``handler(server, ctx, request)`` returns the
    response as a dict (:func:`txn_broker.kafka.codec.build` fits it to the version), or
    None for no response (Produce with acks=0)."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


def allows(server: Listener, ctx: RequestContext, operation: Operation, resource_type: ResourceType,
           name: str) -> bool:
    """The authoriser's answer for this request's principal: every handler asks it first."""
    return server.authorizer.allows(ctx.principal, operation, resource_type, name)
