"""Who may do what through the listener: Kafka's authorisation vocabulary (operations and
resource types, with the codes Kafka's protocol gives them) and the one authoriser every
handler asks first, as Kafka's brokers ask their ``Authorizer``.

Without ACLs, every principal may do everything, as a Kafka broker with no authoriser
configured; the answers handlers give on a refusal are Kafka's (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Operation(enum.IntEnum):
    """Kafka's AclOperation codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


#: the operations each resource type has (what ``authorized_operations`` fields list)
OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                         Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}
#: the one cluster resource's name
CLUSTER_NAME = "kafka-cluster"
#: an ``authorized_operations`` field not asked for
NOT_REQUESTED = -2147483648


@dataclass(frozen=True)
class Principal:
    """Who sent a request: ``User:NAME`` from SASL, ``User:ANONYMOUS`` without it, and
    the address it came from."""

    name: str
    host: str

    @classmethod
    def of(cls, user: str | None, host: str) -> Principal:
        return cls(f"User:{user}" if user else "User:ANONYMOUS", host)


class Authorizer:
    """Answers whether a principal may perform an operation on a resource."""

    def allows(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """No ACLs are configured: everyone may do everything (Kafka without an
        authoriser)."""
        return True

    def allows_any(self, principal: Principal, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` may perform ``operation`` on some resource of the type (an
        idempotent producer needs WRITE on some topic, KIP-679)."""
        return True

    def authorized_operations(self, principal: Principal, resource_type: ResourceType, name: str) -> int:
        """The bit field of the operations on a resource ``principal`` may perform (bit n
        set for operation code n), as Metadata and DescribeGroups answer it."""
        bits = 0
        for op in OPERATIONS.get(resource_type, ()):
            if self.allows(principal, op, resource_type, name):
                bits |= 1 << op
        return bits
