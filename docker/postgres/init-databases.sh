#!/usr/bin/env bash
# Databases, roles and login users of the txn_broker stack.
#
# Run by the postgres image on its first start (mounted into
# /docker-entrypoint-initdb.d, against the image's temporary unix-socket server).
# It is idempotent and re-runnable, so the same script provisions a managed server
# (RDS, Cloud SQL) when pointed at it with the usual libpq variables:
#
#   PGHOST=db.example.com PGUSER=postgres PGPASSWORD=... PGSSLMODE=verify-full \
#     AIRFLOW_DB_USER=... AIRFLOW_DB_PASSWORD=... (and the other variables below) \
#     docker/postgres/init-databases.sh
#
# Re-running also resets the login passwords to the values given, which is how a
# password is rotated.
#
# What it creates:
#   airflow     database, owned by the Airflow login user
#   warehouse   database, owned by the warehouse login user (the example pipeline's sink)
#   txn_broker  database, owned by the NOLOGIN group role txn_broker_owner
#   group roles txn_broker_owner / txn_broker_client / txn_broker_monitor, defined by
#               sql/roles.sql when it is present (mounted at BROKER_SQL_DIR); a
#               minimal equivalent otherwise
#   login users BROKER_OWNER_USER, BROKER_CLIENT_USER, BROKER_MONITOR_USER, members of
#               those group roles. The owner's login switches to txn_broker_owner at
#               connect time (ALTER ROLE ... SET role), so every table the migrations
#               create is owned by the group role and covered by its default privileges.
#
# No other role may connect to these databases (CONNECT is revoked from PUBLIC).
set -euo pipefail

: "${AIRFLOW_DB_USER:?}" "${AIRFLOW_DB_PASSWORD:?}"
: "${BROKER_OWNER_USER:?}" "${BROKER_OWNER_PASSWORD:?}"
: "${BROKER_CLIENT_USER:?}" "${BROKER_CLIENT_PASSWORD:?}"
: "${BROKER_MONITOR_USER:?}" "${BROKER_MONITOR_PASSWORD:?}"
: "${WAREHOUSE_DB_USER:?}" "${WAREHOUSE_DB_PASSWORD:?}"
SQL_DIR="${BROKER_SQL_DIR:-/opt/txn_broker/sql}"

# Inside the image's init phase POSTGRES_USER/POSTGRES_DB name the superuser and its
# database; elsewhere the libpq variables (PGUSER, PGDATABASE, ...) apply.
psql_as_admin() {
    local database="$1"
    shift
    local user_args=()
    if [[ -n "${POSTGRES_USER:-}" ]]; then
        user_args=(--username "$POSTGRES_USER")
    fi
    psql --no-psqlrc -v ON_ERROR_STOP=1 "${user_args[@]}" --dbname "$database" "$@"
}
ADMIN_DB="${POSTGRES_DB:-${PGDATABASE:-postgres}}"

echo "init-databases: databases, group roles and login users"
# Values travel as psql variables (:'name' quotes them as literals, %I/%L in format()
# quote identifiers/literals), so no password is ever spliced into SQL text by the shell.
psql_as_admin "$ADMIN_DB" \
    -v airflow_user="$AIRFLOW_DB_USER" -v airflow_password="$AIRFLOW_DB_PASSWORD" \
    -v warehouse_user="$WAREHOUSE_DB_USER" -v warehouse_password="$WAREHOUSE_DB_PASSWORD" \
    -v owner_user="$BROKER_OWNER_USER" -v owner_password="$BROKER_OWNER_PASSWORD" \
    -v client_user="$BROKER_CLIENT_USER" -v client_password="$BROKER_CLIENT_PASSWORD" \
    -v monitor_user="$BROKER_MONITOR_USER" -v monitor_password="$BROKER_MONITOR_PASSWORD" \
    <<'SQL'
-- group roles: sql/roles.sql may redefine their privileges, but the databases below
-- need the owner role to exist first.
SELECT format('CREATE ROLE %I NOLOGIN', r)
  FROM unnest(ARRAY['txn_broker_owner', 'txn_broker_client', 'txn_broker_monitor']) AS r
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r)
\gexec

-- login users (created, then their password (re)set)
SELECT format('CREATE ROLE %I LOGIN', u)
  FROM unnest(ARRAY[:'airflow_user', :'warehouse_user', :'owner_user', :'client_user', :'monitor_user']) AS u
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = u)
\gexec
SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', u, p)
  FROM (VALUES (:'airflow_user', :'airflow_password'),
               (:'warehouse_user', :'warehouse_password'),
               (:'owner_user', :'owner_password'),
               (:'client_user', :'client_password'),
               (:'monitor_user', :'monitor_password')) AS v(u, p)
\gexec

-- each broker login user is a member of exactly one broker group role
SELECT format('GRANT %I TO %I', g, u)
  FROM (VALUES ('txn_broker_owner', :'owner_user'),
               ('txn_broker_client', :'client_user'),
               ('txn_broker_monitor', :'monitor_user')) AS v(g, u)
\gexec

-- A non-superuser admin (RDS, Cloud SQL) may create a database owned by another role,
-- and revoke on it, only as a member of that role.
SELECT format('GRANT %I TO %I', o, current_user)
  FROM unnest(ARRAY[:'airflow_user', :'warehouse_user', 'txn_broker_owner']) AS o
 WHERE NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
   AND NOT pg_has_role(current_user, o, 'MEMBER')
\gexec

-- databases
SELECT format('CREATE DATABASE %I OWNER %I', d, o)
  FROM (VALUES ('airflow', :'airflow_user'),
               ('warehouse', :'warehouse_user'),
               ('txn_broker', 'txn_broker_owner')) AS v(d, o)
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = d)
\gexec
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', d)
  FROM unnest(ARRAY['airflow', 'warehouse', 'txn_broker']) AS d
\gexec
GRANT CONNECT ON DATABASE txn_broker TO txn_broker_client, txn_broker_monitor;

-- migrations run as the owner's login user but create objects as txn_broker_owner
SELECT format('ALTER ROLE %I IN DATABASE txn_broker SET role = %L', :'owner_user', 'txn_broker_owner')
\gexec
SQL

if [[ -f "$SQL_DIR/roles.sql" ]]; then
    echo "init-databases: applying $SQL_DIR/roles.sql to txn_broker"
    psql_as_admin txn_broker -f "$SQL_DIR/roles.sql"
else
    # Stand-in until sql/roles.sql exists: the same least-privilege split, granted on
    # whatever txn_broker_owner creates later in the public schema.
    echo "init-databases: $SQL_DIR/roles.sql not found; granting the default privileges" >&2
    psql_as_admin txn_broker <<'SQL'
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO txn_broker_client, txn_broker_monitor;
ALTER DEFAULT PRIVILEGES FOR ROLE txn_broker_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO txn_broker_client;
ALTER DEFAULT PRIVILEGES FOR ROLE txn_broker_owner IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO txn_broker_client;
ALTER DEFAULT PRIVILEGES FOR ROLE txn_broker_owner IN SCHEMA public
    GRANT SELECT ON TABLES TO txn_broker_monitor;
SQL
fi
echo "init-databases: done"
