"""A Kafka-protocol listener in front of the broker (``txn-broker serve``): Kafka clients
(librdkafka / confluent-kafka, aiokafka, ...) produce transactionally and read
``read_committed`` from the broker's topics. See docs/kafka-protocol.md.

``backend`` is the only module that calls the broker's internals; the others speak the
protocol (message schemas from ``kio``, generated from Kafka's JSON definitions)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .acls import AclBinding, AclFilter, PatternType, Permission
    from .apis import SUPPORTED
    from .authorizer import Operation, ResourceType
    from .backend import AclStore
    from .limits import ListenerLimits
    from .security import SaslUsers, tls_context
    from .server import KafkaServer, serve

# Loaded on first use: the protocol's message classes (kio) take about a second to import,
# which a CLI command that only manages ACLs, or only imports this package, should not pay.
_EXPORTS = {
    "AclBinding": "acls", "AclFilter": "acls", "PatternType": "acls", "Permission": "acls",
    "SUPPORTED": "apis", "Operation": "authorizer", "ResourceType": "authorizer", "AclStore": "backend",
    "ListenerLimits": "limits", "SaslUsers": "security", "tls_context": "security",
    "KafkaServer": "server", "serve": "server",
}

__all__ = ["SUPPORTED", "AclBinding", "AclFilter", "AclStore", "KafkaServer", "ListenerLimits", "Operation",
           "PatternType", "Permission", "ResourceType", "SaslUsers", "serve", "tls_context"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
