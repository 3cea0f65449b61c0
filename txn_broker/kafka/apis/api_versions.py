"""ApiVersions (18): the keys and versions this listener answers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from .base import Api, Listener, Payload, RequestContext


async def api_versions(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    # asked before authentication: no principal to authorise yet, as in Kafka
    return {"error_code": ErrorCode.none, "api_keys": server.api_keys, "throttle_time": 0}


APIS = (Api(18, "ApiVersions", 0, 3, api_versions),)
