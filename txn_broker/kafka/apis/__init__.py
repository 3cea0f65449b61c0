"""The Kafka APIs the listener answers, one module per API or small group of APIs (as
franz-go's kfake keeps one file per API key beside its connection loop): each module lists
its :class:`~.base.Api` entries in ``APIS``; ``server.py`` reads the connection's frames and
dispatches each request to its handler through :data:`HANDLERS`.

A new API: a module here with its handler (asking the authoriser first, see ``base.allows``)
and its ``APIS``, added to :data:`MODULES`.
"""

from __future__ import annotations

from . import (
    acls,
    api_versions,
    configs,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    producers,
    records,
    sasl,
    topics,
    transactions,
)
from .base import Api, RequestContext

MODULES = (produce, fetch, metadata, offsets, groups, sasl, api_versions, topics, transactions, configs,
           producers, acls, records)
#: api key -> its API
HANDLERS: dict[int, Api] = {api.key: api for module in MODULES for api in module.APIS}
#: api key -> (lowest, highest) version supported; docs/kafka-protocol.md lists them
SUPPORTED: dict[int, tuple[int, int]] = {k: (a.min_version, a.max_version) for k, a in sorted(HANDLERS.items())}

__all__ = ["HANDLERS", "SUPPORTED", "Api", "RequestContext"]
