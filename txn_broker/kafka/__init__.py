"""A Kafka-protocol listener in front of the broker (``txn-broker serve``): Kafka clients
(librdkafka / confluent-kafka, aiokafka, ...) produce transactionally and read
``read_committed`` from the broker's topics. See docs/kafka-protocol.md.

``backend`` is the only module that calls the broker's internals; the others speak the
protocol (message schemas from ``kio``, generated from Kafka's JSON definitions)."""

from __future__ import annotations

from .apis import SUPPORTED
from .limits import ListenerLimits
from .security import SaslUsers, tls_context
from .server import KafkaServer, serve

__all__ = ["SUPPORTED", "KafkaServer", "ListenerLimits", "SaslUsers", "serve", "tls_context"]
