"""SASL authentication (PLAIN and SCRAM-SHA-256, SCRAM from the maintained ``scramp``
library) and TLS for the Kafka-protocol listener.

Credentials come from a file the operator gives (``--sasl-users``): one ``user:password`` a
line, ``#`` comments. Passwords stay in memory; SCRAM keeps only the salted keys. Nothing of
a credential is ever logged or sent back.
"""

from __future__ import annotations

import hmac
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import scramp
from kio.schema.errors import ErrorCode

from ..errors import InvalidConfigError

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
MECHANISMS = (PLAIN, SCRAM_SHA_256)
_SCRAM = scramp.ScramMechanism(SCRAM_SHA_256)


@dataclass(frozen=True)
class SaslUsers:
    passwords: dict[str, str] = field(repr=False)
    scram: dict[str, tuple[Any, ...]] = field(repr=False)

    @classmethod
    def from_file(cls, path: str | Path) -> SaslUsers:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidConfigError(f"cannot read the SASL users file {path}: {error.strerror}") from None
        passwords = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, password = line.partition(":")
            if not sep or not user or not password:
                raise InvalidConfigError(f"{path} line {number}: expected user:password")
            passwords[user] = password
        if not passwords:
            raise InvalidConfigError(f"the SASL users file {path} has no user")
        return cls(passwords, {u: _SCRAM.make_auth_info(p) for u, p in passwords.items()})


class SaslSession:
    """One connection's authentication: SaslHandshake then SaslAuthenticate round(s)."""

    def __init__(self, users: SaslUsers) -> None:
        self.users = users
        self.mechanism: str | None = None
        self.user: str | None = None
        #: SaslHandshake v0 was used: the mechanism's tokens come as bare frames (no
        #: request header) and are answered the same way, as before KIP-152
        self.bare_tokens = False
        self._scram: Any = None

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    def handshake(self, mechanism: str) -> ErrorCode:
        if self.mechanism is not None or mechanism not in MECHANISMS:
            return ErrorCode.unsupported_sasl_mechanism if mechanism not in MECHANISMS else \
                ErrorCode.illegal_sasl_state
        self.mechanism = mechanism
        return ErrorCode.none

    def authenticate(self, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
        """(error code, error message, bytes for the client)."""
        if self.mechanism is None or self.authenticated:
            return ErrorCode.illegal_sasl_state, "SaslHandshake first", b""
        if self.mechanism == PLAIN:
            parts = bytes(token).split(b"\x00")
            if len(parts) != 3:
                return ErrorCode.sasl_authentication_failed, "malformed PLAIN token", b""
            user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
            expected = self.users.passwords.get(user)
            if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
                log.warning("SASL/PLAIN authentication failed for user %r", user)
                return ErrorCode.sasl_authentication_failed, "authentication failed", b""
            self.user = user
            return ErrorCode.none, None, b""
        try:
            if self._scram is None:
                self._scram = _SCRAM.make_server(self._auth_info)
                self._scram.set_client_first(bytes(token).decode("utf-8"))
                return ErrorCode.none, None, self._scram.get_server_first().encode()
            self._scram.set_client_final(bytes(token).decode("utf-8"))
            final = self._scram.get_server_final().encode()
        except (scramp.ScramException, KeyError, UnicodeDecodeError) as error:
            log.warning("SASL/SCRAM-SHA-256 authentication failed: %s", type(error).__name__)
            return ErrorCode.sasl_authentication_failed, "authentication failed", b""
        self.user = str(self._scram.user) if getattr(self._scram, "user", None) else "scram-user"
        return ErrorCode.none, None, final

    def _auth_info(self, user: str) -> tuple[Any, ...]:
        return self.users.scram[user]  # KeyError: unknown user, authentication fails


def tls_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as error:
        raise InvalidConfigError(f"cannot load the TLS certificate {cert} and key {key}: {error}") from None
    return context
