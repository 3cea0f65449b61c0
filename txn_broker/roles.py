"""Least-privilege PostgreSQL roles: applying ``sql/roles.sql`` and making login users.

Three NOLOGIN group roles (``txn_broker_owner``, ``txn_broker_client``,
``txn_broker_monitor``); deployments make their login users members of one each. The
owner runs the migrations, and :func:`txn_broker.migrations.upgrade_db` re-applies the
grants after it applied a migration, so a new table never lacks its privileges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import sql as sql_files  # type: ignore[attr-defined]  # sql/ installed as txn_broker.sql
from .database import Database, Tx
from .errors import InvalidConfigError, InvalidNameError

OWNER, CLIENT, MONITOR = "txn_broker_owner", "txn_broker_client", "txn_broker_monitor"
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_$]{0,62}")

# Literal statements: every value is bound, and quoted by the server (format %I / %L).
_STAGE_LOGIN = ("SELECT set_config('txn_broker.login_user', :user, true), "
                "set_config('txn_broker.login_password', :password, true), "
                "set_config('txn_broker.login_role', :role, true)")
_CREATE_LOGIN = """DO $$
DECLARE
    login text := current_setting('txn_broker.login_user');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = login) THEN
        EXECUTE format('CREATE ROLE %I LOGIN', login);
    END IF;
    EXECUTE format('ALTER ROLE %I WITH LOGIN PASSWORD %L', login, current_setting('txn_broker.login_password'));
    EXECUTE format('GRANT %I TO %I', current_setting('txn_broker.login_role'), login);
END
$$"""
_FORGET_LOGIN = "SELECT set_config('txn_broker.login_password', '', true)"


def validate_role_name(name: object) -> str:
    """A PostgreSQL role name we accept: 1-63 of ``[a-z0-9_$]``, not starting with a digit."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or name.startswith("pg_"):
        raise InvalidNameError(f"invalid role name {name!r}: use 1-63 characters of [a-z0-9_$], not pg_*")
    return name


def roles_script(owner: str = OWNER, client: str = CLIENT, monitor: str = MONITOR) -> str:
    """``sql/roles.sql`` with the three group roles renamed (validated identifiers)."""
    names = {OWNER: validate_role_name(owner), CLIENT: validate_role_name(client),
             MONITOR: validate_role_name(monitor)}
    if len(set(names.values())) != 3:
        raise InvalidNameError("the owner, client and monitor roles must be three different roles")
    return re.sub(r"\btxn_broker_(owner|client|monitor)\b", lambda m: names[m.group(0)], sql_files.roles())


def split_script(script: str) -> list[str]:
    """The statements of a script whose ``DO $$ ... $$`` bodies contain semicolons;
    comment lines dropped."""
    statements, current, quoted = [], [], False
    for line in script.splitlines():
        if not quoted and line.lstrip().startswith("--"):
            continue
        current.append(line)
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and line.rstrip().endswith(";"):
            statement = "\n".join(current).strip().rstrip(";").strip()
            if statement:
                statements.append(statement)
            current = []
    rest = "\n".join(current).strip()
    if rest:
        statements.append(rest)
    return statements


def roles_exist(tx: Tx, client: str = CLIENT) -> bool:
    return bool(tx.raw("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :r)", r=client).scalar())


def apply_in(tx: Tx, script: str | None = None) -> None:
    """Run the roles script inside an open transaction."""
    for statement in split_script(script or roles_script()):
        tx.raw(statement)


def _require_postgres(db: Database) -> None:
    if db.dialect != "postgresql":
        raise InvalidConfigError("database roles exist only on PostgreSQL; SQLite has no users")


def apply_roles(db: Database, owner: str = OWNER, client: str = CLIENT, monitor: str = MONITOR) -> None:
    """Create the group roles if missing (needs CREATEROLE) and set every grant. Idempotent."""
    _require_postgres(db)
    script = roles_script(owner, client, monitor)
    db.run(lambda tx: apply_in(tx, script))


def create_login(db: Database, user: str, password: str, role: str) -> None:
    """Create (or update the password of) login ``user`` as a member of group ``role``.
    The password travels as a bound parameter and is quoted by the server; it is never
    part of statement text we build, nor of any message we raise."""
    _require_postgres(db)
    validate_role_name(user)
    validate_role_name(role)
    if not isinstance(password, str) or not password or "\x00" in password:
        raise InvalidConfigError("a login password must be a non-empty string")

    def work(tx: Tx) -> None:
        tx.raw(_STAGE_LOGIN, user=user, password=password, role=role)
        tx.raw(_CREATE_LOGIN)
        tx.raw(_FORGET_LOGIN)

    db.run(work)


# -- which role a connection uses ------------------------------------------------------------

_SESSION_ROLE = """SELECT session_user AS login, current_user AS role,
       COALESCE((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) AS superuser,
       t.tableowner AS table_owner,
       COALESCE(pg_has_role(current_user, t.tableowner, 'MEMBER'), false) AS owns_tables
FROM (SELECT 1) AS one
LEFT JOIN pg_tables AS t ON t.schemaname = current_schema() AND t.tablename = 'topics'"""


@dataclass(frozen=True)
class SessionRole:
    """Who a database connection is: the login, the role it acts as (``SET ROLE`` may switch
    it), and whether that role is a superuser or owns the broker's tables."""

    login: str
    role: str
    superuser: bool
    #: the role owning the broker's tables (None before the migrations ran)
    table_owner: str | None
    owns_tables: bool

    @property
    def privileged(self) -> bool:
        """More than a client needs: the schema's owner (it may alter or drop the tables,
        rewrite the transaction log) or a superuser."""
        return self.superuser or self.owns_tables

    def describe(self) -> str:
        """``login 'x' (role 'y', which owns the broker's tables)``: names only, never a secret."""
        acting = f"role {self.role!r}, " if self.role != self.login else ""
        if self.superuser:
            what = "a superuser"
        elif self.table_owner == self.role:
            what = "which owns the broker's tables"
        else:
            what = f"a member of {self.table_owner!r}, which owns the broker's tables"
        return f"login {self.login!r} ({acting}{what})"


def session_role(db: Database) -> SessionRole | None:
    """The role ``db``'s connections use, or None on SQLite (no users)."""
    if db.dialect != "postgresql":
        return None
    row = db.read(lambda tx: tx.raw(_SESSION_ROLE).mappings().one())
    return SessionRole(login=str(row["login"]), role=str(row["role"]), superuser=bool(row["superuser"]),
                       table_owner=row["table_owner"], owns_tables=bool(row["owns_tables"]))


def privileged_role_warning(db: Database) -> str | None:
    """A warning when ``db`` is reached as the schema's owner or a superuser rather than a
    login of the least-privilege client role; None when the role is fine (or on SQLite).
    Names roles only, never a password."""
    role = session_role(db)
    if role is None or not role.privileged:
        return None
    return (f"the broker database is reached as {role.describe()}: producers, consumers and "
            f"tasks should use a login of the least-privilege client role ({CLIENT} unless "
            f"renamed, see sql/roles.sql); keep the owner role for migrations (txn-broker db upgrade)")
