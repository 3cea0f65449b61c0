#!/usr/bin/env bash
# One-shot start-up of Airflow (the compose service airflow-init; a Job or a Helm
# migration hook elsewhere): migrate the metadata database, provision the UI admin,
# and check the connections the environment provides before any component uses them.
# Safe to run again: every step is idempotent.
set -euo pipefail

case "${AIRFLOW__CORE__EXECUTOR:-}" in
    *CeleryExecutor*)
        echo "airflow-init: checking the Celery broker"
        # Without it the scheduler queues tasks nobody runs and the workers retry forever;
        # say so here, once, instead.
        python - <<'PY'
import os
import socket
import sys
from urllib.parse import urlsplit

url = os.environ.get("AIRFLOW__CELERY__BROKER_URL", "")
if not url:
    sys.exit("AIRFLOW__CELERY__BROKER_URL is empty: the CeleryExecutor needs Redis (the redis service)")
parts = urlsplit(url)
host, port = parts.hostname or "localhost", parts.port or 6379
try:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        reply = sock.recv(64)
except OSError as error:
    sys.exit(f"the Celery broker (Redis) at {host}:{port} is not reachable ({error.strerror or error}): "
             "start the redis service, or fix AIRFLOW__CELERY__BROKER_URL")
if not reply.startswith((b"+PONG", b"-NOAUTH")):
    sys.exit(f"{host}:{port} does not answer like Redis: check AIRFLOW__CELERY__BROKER_URL")
PY
        ;;
esac

echo "airflow-init: migrating the Airflow metadata database"
airflow db migrate

echo "airflow-init: checking the connections defined in the environment"
# A password holding a quote or a backslash breaks the JSON of the connection; fail
# here, with the variable's name, rather than in the first task that uses it. Values
# are never printed.
python - <<'PY'
import json
import os
import sys
from urllib.parse import urlsplit

problems = []
raw = os.environ.get("AIRFLOW_CONN_TXN_BROKER_DEFAULT", "")
try:
    conn = json.loads(raw)
except ValueError as error:
    problems.append(f"AIRFLOW_CONN_TXN_BROKER_DEFAULT is not valid JSON ({error.msg}, column {error.colno})")
else:
    extra = conn.get("extra") or {}
    if conn.get("conn_type") != "txn_broker":
        problems.append("AIRFLOW_CONN_TXN_BROKER_DEFAULT: conn_type must be txn_broker")
    for key in ("database_url", "storage_url"):
        if not extra.get(key):
            problems.append(f"AIRFLOW_CONN_TXN_BROKER_DEFAULT: extra.{key} is empty")
    try:
        urlsplit(extra.get("database_url", "")).port
    except ValueError:
        problems.append("AIRFLOW_CONN_TXN_BROKER_DEFAULT: extra.database_url is not a valid URL "
                        "(percent-encode special characters in passwords)")
if problems:
    sys.exit("\n".join(problems))
PY

auth_manager="${AIRFLOW__CORE__AUTH_MANAGER:-SimpleAuthManager}"
case "$auth_manager" in
    *SimpleAuthManager)
        : "${AIRFLOW_ADMIN_USERNAME:?}" "${AIRFLOW_ADMIN_PASSWORD:?}"
        : "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?}"
        echo "airflow-init: writing the SimpleAuthManager password of ${AIRFLOW_ADMIN_USERNAME}"
        # SimpleAuthManager generates (and logs) a random password for every user missing
        # from this file; writing it here makes the login the one configured in .env.
        python - <<'PY'
import json
import os
from pathlib import Path

path = Path(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
path.parent.mkdir(parents=True, exist_ok=True)
try:
    passwords = json.loads(path.read_text() or "{}")
except (FileNotFoundError, ValueError):
    passwords = {}
passwords[os.environ["AIRFLOW_ADMIN_USERNAME"]] = os.environ["AIRFLOW_ADMIN_PASSWORD"]
tmp = path.with_name(path.name + ".tmp")
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as file:
    json.dump(passwords, file)
    file.write("\n")
os.replace(tmp, path)
PY
        ;;
    *)
        echo "airflow-init: auth manager $auth_manager manages its own users; none created"
        ;;
esac
echo "airflow-init: done"
