"""SaslHandshake (17) and SaslAuthenticate (36): PLAIN and SCRAM (security.py), offered
only when the listener has SASL users."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..security import MECHANISMS
from .base import Api, Listener, Payload, RequestContext


async def sasl_handshake(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    # v0 (the mechanism's tokens then come as bare frames, server.py) and v1 are both
    # advertised, as Kafka does: librdkafka up to 2.0 refuses to authenticate without v0
    assert ctx.session is not None
    code = ctx.session.handshake(req.mechanism)
    if ctx.version == 0 and code == ErrorCode.none:
        ctx.session.bare_tokens = True
    return {"error_code": code, "mechanisms": list(MECHANISMS)}


async def sasl_authenticate(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    assert ctx.session is not None
    code, message, token = ctx.session.authenticate(req.auth_bytes)
    return {"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": 0}


APIS = (
    Api(17, "SaslHandshake", 0, 1, sasl_handshake),
    Api(36, "SaslAuthenticate", 0, 2, sasl_authenticate),
)
#: the keys answered only when SASL is configured
SASL_KEYS = (17, 36)
