"""``txn_broker`` as a message queue of the common-messaging provider's ``MessageQueueTrigger``.

``apache-airflow-providers-common-messaging`` (2.1.2, pinned in ``constraints.txt``) finds
queue providers through Airflow's ``ProvidersManager``: every installed provider may list
classes under ``"queues"`` in its provider info, and ``MessageQueueTrigger`` picks the one
whose ``scheme_matches(scheme)`` (or, deprecated, ``queue_matches(queue)``) is true. The
``txn-broker`` provider info (``txn_broker_airflow.provider_info``) lists this class, so both work:

    MessageQueueTrigger(scheme="txn_broker", topics=["orders_raw"], group_id="orders_events.accept")
    MessageQueueTrigger(queue="txn_broker://txn_broker_default/orders_raw,orders_more?group_id=g")

and run :class:`~txn_broker_airflow.triggers.committed_records.CommittedRecordsEventTrigger`
(``MessageQueueTrigger.serialize()`` returns the inner trigger's, so the triggerer runs ours).
The queue URI is ``txn_broker://<connection id>/<topic>[,<topic>...]?group_id=<group>
[&poll_interval=<seconds>][&reannounce_after=<seconds>]``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider

from .triggers.committed_records import CommittedRecordsEventTrigger

SCHEME = "txn_broker"


def parse_queue_uri(queue: str) -> dict[str, Any]:
    """The trigger arguments of a ``txn_broker://conn/topic[,topic]?group_id=g`` URI
    (ValueError when it is not one)."""
    prefix = f"{SCHEME}://"
    if not queue.startswith(prefix):
        raise ValueError(f"not a {prefix} queue: {queue!r}")
    # an underscore is not allowed in a URI scheme (urlsplit would not split it off): the
    # scheme is matched as a prefix, the rest parsed as a network-path reference
    parts = urlsplit("//" + queue[len(prefix):])
    topics = [unquote(t) for t in parts.path.strip("/").split(",") if t]
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if not topics or not query.get("group_id"):
        raise ValueError(f"{queue!r}: expected {SCHEME}://<conn id>/<topic>[,<topic>...]?group_id=<group>")
    kwargs: dict[str, Any] = {"topics": topics, "group_id": query["group_id"]}
    if parts.netloc:
        kwargs["txn_broker_conn_id"] = unquote(parts.netloc)
    for name in ("poll_interval", "reannounce_after"):
        if name in query:
            kwargs[name] = float(query[name])
    return kwargs


class TxnBrokerQueueProvider(BaseMessageQueueProvider):
    """Scheme ``txn_broker``: committed records past a consumer group's offsets."""

    scheme = SCHEME

    def queue_matches(self, queue: str) -> bool:
        return queue.startswith(f"{SCHEME}://")

    def trigger_class(self) -> type[CommittedRecordsEventTrigger]:
        return CommittedRecordsEventTrigger

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        found = parse_queue_uri(queue)
        return {k: v for k, v in found.items() if k not in kwargs}
