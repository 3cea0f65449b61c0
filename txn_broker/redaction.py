"""Keeping secrets out of what is printed, logged or shown: the one implementation, used by
the broker's own messages and reprs, the CLI (plain, ``--json``, ``--debug``, logs), the
Airflow hook and the UI.

One rule covers every credential a URL can carry:

* its user-info password (``postgresql://user:SECRET@host/db``, ``s3://KEY:SECRET@bucket``);
* any query parameter (or libpq ``key=value`` setting) whose name says it is a credential:
  :data:`CREDENTIAL_PARAMETER` matches ``password``, ``sslpassword``, ``passwd``, ``pwd``,
  and anything naming a secret, token, signature, credential or key of AWS, Azure, GCP and
  OAuth drivers (``aws_secret_access_key``, ``X-Amz-Signature``, ``sas_token``,
  ``client_secret``, ``private_key``...). Parameters that name a file (``sslkey``,
  ``passfile``, ``sslcert``) are not secrets and stay visible.

Functions (their names are part of the package's API):

* :func:`mask_url`: a database URL with every credential replaced by ``***``;
* :func:`strip_userinfo`: any other URL (storage, endpoint) without ``user:password@`` and
  with its credential parameters masked;
* :func:`url_secrets`: what of a URL must never appear (its password and credential
  parameter values, or all of it when it cannot be parsed);
* :func:`redact`: a text with given secrets and every credential of any URL or libpq setting
  in it replaced by ``***``.
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

import sqlalchemy as sa

#: what a hidden secret is replaced with
MASK = "***"

#: the names of query parameters and libpq settings that hold a credential
CREDENTIAL_PARAMETER = re.compile(
    r"(?:[a-z0-9_.\-]*(?:password|passwd|passphrase|secret|token|signature|credential|api_?key|access_?key"
    r"|private_?key|session_?key|account_?key|auth_?key)[a-z0-9_.\-]*|pwd|pass|sig)",
    re.IGNORECASE)

_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^@\s/]+)@")
#: ``name=value`` after ``?``, ``&``, ``;`` or whitespace (URL queries, libpq DSNs), the value
#: up to the next separator (or quoted, as libpq allows)
_PARAMETER = re.compile(
    r"(?P<head>(?:^|(?<=[?&;\s,(\"']))(?P<name>[A-Za-z0-9_.\-]+)\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^&;\s#'\",)]+)")


def _mask_parameters(text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        if CREDENTIAL_PARAMETER.fullmatch(match["name"]):
            return f"{match['head']}{MASK}"
        value = match["value"]
        if value[:1] in "'\"" and len(value) > 1:  # a quoted value may hold settings itself (a DSN)
            return f"{match['head']}{value[0]}{_mask_parameters(value[1:-1])}{value[-1]}"
        return match[0]
    return _PARAMETER.sub(mask, text)


def _mask_text(text: str) -> str:
    """Every user-info password and credential parameter in ``text`` masked."""
    return _mask_parameters(_USERINFO.sub(lambda m: f"{m['head']}{MASK}@", text))


def mask_url(url: str | sa.URL) -> str:
    """The database URL with its password and credential parameters replaced by ``***``,
    safe for logs and messages."""
    try:
        rendered = sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL may still contain a secret: show nothing of it
        return "<unparsable database URL>"
    return _mask_parameters(rendered)


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (storage and endpoint URLs may carry them) and
    with its credential parameters masked."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or ""
        if port:
            host = f"{host}:{port}"
        url = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return _mask_parameters(url)


def _spellings(value: str) -> list[str]:
    """A secret as it may appear in a URL: as given, and percent- or plus-encoded."""
    return [value, quote(value, safe=""), quote_plus(value)]


def url_secrets(url: str | None) -> list[str]:
    """What must never be printed of a URL: its password and the values of its credential
    parameters (as given and as encoded), or the URL itself when it cannot be parsed."""
    if not url:
        return []
    try:
        parsed = sa.make_url(url)
    except Exception:  # an unparsable URL: hide all of it
        return [url]
    found: list[str] = []
    if parsed.password:
        found += _spellings(str(parsed.password))
    for name, value in parsed.query.items():
        if CREDENTIAL_PARAMETER.fullmatch(name):
            for one in (value,) if isinstance(value, str) else value:
                found += _spellings(one) if one else []
    return list(dict.fromkeys(s for s in found if s))


def redact(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` without any of ``secrets`` (longest first, so a secret containing another
    is hidden whole) and without any URL password or credential parameter."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _mask_text(text)
