"""The topics a task declares (``topics=[TopicSpec(...)]``), created or checked when the
task starts, and the check that every topic a task reads or writes exists, made before
anything slow (a Spark JVM) starts.

``TopicSpec(name, partitions, schema, config)`` (from ``txn_broker``, also exported by this
package) is the seam: ``Broker.ensure_topics`` creates a missing topic with that shape and
config, and brings an existing one to it when the change keeps the topic's rules (a new
schema version, more partitions: ``evolve=True``, recorded as made by the task). So the same
DAG sets itself up on a fresh broker, carries its topic changes with it when it is
deployed, and refuses to write into a topic whose shape it cannot evolve to
(IncompatibleSchemaError naming the field and the rule).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from txn_broker import TopicSpec

from .errors import MissingTopicsError, TopicDeclarationError

if TYPE_CHECKING:
    from txn_broker import Broker

log = logging.getLogger(__name__)


def declared_topics(topics: Iterable[Any] | None, task: str) -> list[TopicSpec]:
    """The ``topics=`` argument of an operator, checked where the DAG is parsed: a list of
    ``TopicSpec``, each name once. Raises TopicDeclarationError."""
    if topics is None:
        return []
    if isinstance(topics, TopicSpec | str):
        topics = [topics]
    specs = list(topics)
    wrong = [t for t in specs if not isinstance(t, TopicSpec)]
    if wrong:
        raise TopicDeclarationError(
            f"task {task!r}: topics= takes TopicSpec values (from txn_broker_airflow import TopicSpec; "
            f"TopicSpec(name, partitions, schema, config)), got {type(wrong[0]).__name__} {wrong[0]!r}")
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TopicDeclarationError(f"task {task!r}: topics= declares {', '.join(twice)} more than once")
    return specs


def set_up_topics(broker: Broker, specs: Sequence[TopicSpec], needed: Iterable[str], task: str,
                  conn_id: str) -> dict[str, str]:
    """Create or check the declared ``specs`` (``Broker.ensure_topics``), then check that
    every topic in ``needed`` exists. Returns ``{topic: "created" | "exists" | "evolved"}`` for the
    declared ones (``"evolved"``: altered to its declaration). Raises MissingTopicsError
    naming every missing topic, IncompatibleSchemaError or InvalidPartitionsError for a
    declared topic that cannot be evolved to its declaration (nothing changed)."""
    done = broker.ensure_topics(list(specs), evolve=True, by=f"airflow:{task}") if specs else {}
    for name, outcome in sorted(done.items()):
        if outcome in ("created", "evolved"):
            log.info("%s topic %s (declared by task %s)", outcome, name, task)
    existing = set(broker.list_topics())
    missing = [t for t in dict.fromkeys(needed) if t not in existing]
    if missing:
        raise MissingTopicsError(
            f"task {task!r}: topic(s) {', '.join(missing)} do not exist on the broker of connection {conn_id!r} "
            f"({broker.database_location}); declare them with topics=[TopicSpec(name, partitions, schema)] "
            "on the task that writes them, or create them with `txn-broker topics create`")
    return done
