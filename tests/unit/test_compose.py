"""The docker-compose stack, checked without a Docker engine.

docker-compose.yml is validated against the Compose Specification schema and then
read as data: health checks and the dependencies that wait on them, the environment
each service gets (including every ``TXN_BROKER_*`` variable the code reads, found by
scanning it), the mounts Airflow looks at, the Spark master URL, the least-privilege
database roles, .env.example, and that no secret is written into the file itself.
The Dockerfile is parsed to check that it installs this repository with its pinned
constraints.

Each check is a function returning a list of problems. The tests run it on the real
files and expect none, then run it on a copy broken in one way and expect a problem,
so that no check can pass vacuously.

The module is longer than our usual ~600 lines on purpose: it is the one place that
describes the deployment's invariants, and each check stays next to the breakages
that prove it can fail.
"""

from __future__ import annotations

import ast
import copy
import json
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from _compose import REFERENCE, interpolate, references, tokens

REPO = Path(__file__).resolve().parents[2]
#: the schema, committed with the tests (see schemas/README.md)
COMPOSE_SCHEMA = Path(__file__).resolve().parent / "schemas" / "compose-spec.json"
SCANNED_DIRS = ("txn_broker", "plugins", "dags", "spark_apps")

AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
SPARK_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
SPARK_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DEFAULT_SPARK_MASTER_PORT = 7077
WAIT_CONDITIONS = {"service_healthy", "service_completed_successfully"}

# What the Airflow components need besides the TXN_BROKER_* names found in the code.
AIRFLOW_ENV = {
    "TXN_BROKER_DATABASE_URL",
    "TXN_BROKER_STORAGE_URL",
    "TXN_BROKER_S3_ENDPOINT_URL",
    "TXN_BROKER_SPARK_MASTER",
    "TXN_BROKER_WAREHOUSE_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "AIRFLOW__CORE__EXECUTOR",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__CORE__AUTH_MANAGER",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__CORE__LOAD_EXAMPLES",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW_CONN_TXN_BROKER_DEFAULT",
    "AIRFLOW_CONN_SPARK_DEFAULT",
}
# Spark executors inherit the worker's environment; they read and upload segments.
SPARK_WORKER_ENV = {
    "TXN_BROKER_DATABASE_URL",
    "TXN_BROKER_STORAGE_URL",
    "TXN_BROKER_S3_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
}
# Every Airflow component must agree on these, or tokens, sessions and connections break.
AIRFLOW_SHARED_SETTINGS = (
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__CORE__EXECUTOR",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
)
# TXN_BROKER_* variables the code reads that a deployment must not set. A new variable
# in the code fails test_code_env_vars_reach_airflow until it is set in
# docker-compose.yml or listed here with the reason.
NOT_FOR_THE_STACK = {
    "TXN_BROKER_HOME": "locates the embedded SQLite/local-dir defaults; the stack sets URLs",
    "TXN_BROKER_FAULTS": "fault injection for the test suite",
    "TXN_BROKER_FAULTS_KILL_RATE": "fault injection for the test suite",
    "TXN_BROKER_FAULTS_SEED": "fault injection for the test suite",
    "TXN_BROKER_SPARK_KEEP_SESSION": "tests and the demo: stages run by dag.test() in one process share one JVM; "
                                     "under a scheduler each task is its own process",
    "TXN_BROKER_EVENTS_POLL_INTERVAL": "the orders_events example's watcher interval; its default (5 s) suits "
                                       "the stack, tests shorten it",
    "TXN_BROKER_EVENTS_REANNOUNCE_AFTER": "the orders_events example's re-announcement delay; its default (60 s) "
                                          "suits the stack, tests shorten it",
}
NEVER_SET = {"TXN_BROKER_FAULTS", "TXN_BROKER_FAULTS_KILL_RATE", "TXN_BROKER_FAULTS_SEED"}

SECRET_KEY_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|FERNET|PRIVATE|CREDENTIAL|ACCESS_KEY|API_KEY")
NOT_A_SECRET_VALUE = re.compile(r"_(FILE|PATH|DIR|USERS?|USERNAME|ID)$")
ONLY_REFERENCES = re.compile(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\})+")
URL_USERINFO = re.compile(r"[a-z][a-z0-9+.-]*://(?P<userinfo>[^/@\s\"']+)@")
JSON_SECRET_PAIR = re.compile(
    r"\"(?P<key>[^\"]*(?:password|secret|token|key)[^\"]*)\"\s*:\s*\"(?P<value>[^\"]*)\"",
    re.IGNORECASE,
)
HIGH_ENTROPY = re.compile(r"[A-Za-z0-9+=_-]{24,}")


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Stack:
    compose: dict[str, Any]
    compose_text: str
    env: dict[str, str]  # .env.example
    dockerfile: str
    dockerignore: tuple[str, ...]
    code_env: frozenset[str]  # TXN_BROKER_* names read by the code


def parse_env_file(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        assert sep, f".env.example line is not KEY=VALUE: {line!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def scan_code_env(roots: list[Path]) -> set[str]:
    """TXN_BROKER_* names used as string constants in the Python files under ``roots``.

    A constant that is exactly such a name is how an environment variable is read
    (``os.environ.get("TXN_BROKER_X")``, ``getenv(NAME)`` with ``NAME = "..."``);
    mentions inside docstrings or messages are not. Files that do not parse (work in
    progress) fall back to a regex over quoted names."""
    names: set[str] = set()
    exact = re.compile(r"TXN_BROKER_[A-Z0-9_]+")
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
            source = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(source)
            except SyntaxError:
                names.update(re.findall(r"[\"'](TXN_BROKER_[A-Z0-9_]+)[\"']", source))
                continue
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and exact.fullmatch(node.value)
                ):
                    names.add(node.value)
    return names


@pytest.fixture(scope="module")
def stack() -> Stack:
    compose_text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    return Stack(
        compose=yaml.safe_load(compose_text),
        compose_text=compose_text,
        env=parse_env_file((REPO / ".env.example").read_text(encoding="utf-8")),
        dockerfile=(REPO / "Dockerfile").read_text(encoding="utf-8"),
        dockerignore=tuple(
            line.strip()
            for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ),
        code_env=frozenset(scan_code_env([REPO / d for d in SCANNED_DIRS])),
    )


def mutated(stack: Stack, change: Callable[[dict[str, Any]], None]) -> Stack:
    compose = copy.deepcopy(stack.compose)
    change(compose)
    return replace(stack, compose=compose)


# --------------------------------------------------------------------------- reading


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose.get("services") or {}


def invocation(service: dict[str, Any]) -> list[str]:
    return tokens(service.get("entrypoint")) + tokens(service.get("command"))


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.partition("=")[::2] for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def scalars(node: Any) -> Iterator[str]:
    """Every key and value of a parsed YAML document, as text."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from scalars(value)
    elif isinstance(node, list):
        for item in node:
            yield from scalars(item)
    elif node is not None:
        yield str(node)


def resolved_env(stack: Stack, name: str) -> dict[str, str]:
    return {
        k: interpolate(v, stack.env) for k, v in environment(services(stack.compose)[name]).items()
    }


def airflow_services(compose: dict[str, Any]) -> dict[str, str]:
    """{service name: Airflow component} for services running one of the components."""
    found = {}
    for name, service in services(compose).items():
        args = tokens(service.get("command"))
        if args[:1] == ["airflow"]:
            args = args[1:]
        if args and args[0] in AIRFLOW_COMPONENTS:
            found[name] = args[0]
    return found


def spark_master(compose: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for name, service in services(compose).items():
        if SPARK_MASTER_CLASS in invocation(service):
            return name, service
    return None


def spark_workers(compose: dict[str, Any]) -> list[str]:
    return [n for n, s in services(compose).items() if SPARK_WORKER_CLASS in invocation(s)]


def broker_migrators(compose: dict[str, Any]) -> list[str]:
    found = []
    for name, service in services(compose).items():
        args = invocation(service)
        for i, arg in enumerate(args):
            if posixpath.basename(arg) == "txn-broker" and args[i + 1 : i + 3] == ["db", "upgrade"]:
                found.append(name)
    return found


def one_shots(compose: dict[str, Any]) -> set[str]:
    """Services something waits on to complete: they run once and exit."""
    return {
        target
        for service in services(compose).values()
        if isinstance(service.get("depends_on"), dict)
        for target, spec in service["depends_on"].items()
        if isinstance(spec, dict) and spec.get("condition") == "service_completed_successfully"
    }


def mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            target = rest.split(":")[0] if rest else source
        else:
            source, target = str(volume.get("source", "")), str(volume.get("target", ""))
        found.append((source, target))
    return found


def repo_path(source: str) -> Path | None:
    """The repository path a bind mount's source names, or None for a named volume."""
    if not source.startswith((".", "/")):
        return None
    return (REPO / source).resolve()


def url_user(url: str) -> str | None:
    return urlsplit(url).username


# --------------------------------------------------------------------------- checks


def schema_problems(stack: Stack) -> list[str]:
    schema = json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator.iter_errors(stack.compose)
    ]


def build_problems(stack: Stack) -> list[str]:
    problems = []
    for name, service in services(stack.compose).items():
        build = service.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = (REPO / build.get("context", ".")).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        if not context.is_dir():
            problems.append(f"{name}: build context {context} does not exist")
        elif not dockerfile.is_file():
            problems.append(f"{name}: Dockerfile {dockerfile} does not exist")
    return problems


def healthcheck_problems(stack: Stack) -> list[str]:
    problems = []
    shots = one_shots(stack.compose)
    for name, service in services(stack.compose).items():
        check = service.get("healthcheck") or {}
        test = tokens(check.get("test"))
        if name in shots:
            if service.get("restart") not in (None, "no") and not str(
                service["restart"]
            ).startswith("on-failure"):
                problems.append(
                    f"{name}: a one-shot service must not restart ({service['restart']})"
                )
            continue
        if not test or check.get("disable") or test[0] == "NONE":
            problems.append(f"{name}: no health check")
    return problems


def depends_on_problems(stack: Stack) -> list[str]:
    problems = []
    all_services = services(stack.compose)
    for name, service in all_services.items():
        depends = service.get("depends_on")
        if depends is None:
            continue
        if not isinstance(depends, dict):
            problems.append(f"{name}: depends_on is a list, so it waits on nothing")
            continue
        for target, spec in depends.items():
            condition = (spec or {}).get("condition")
            if target not in all_services:
                problems.append(f"{name}: depends on unknown service {target}")
            elif condition not in WAIT_CONDITIONS:
                problems.append(f"{name}: depends on {target} with condition {condition!r}")
            elif condition == "service_healthy" and not (
                all_services[target].get("healthcheck") or {}
            ).get("test"):
                problems.append(
                    f"{name}: waits for {target} to be healthy, which has no health check"
                )

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for target in all_services.get(start, {}).get("depends_on") or {}:
            if target == goal or (target not in seen and reaches(target, goal, seen | {target})):
                return True
        return False

    problems += [
        f"{name}: depends on itself through a cycle"
        for name in all_services
        if reaches(name, name, set())
    ]
    return problems


def env_example_problems(stack: Stack) -> list[str]:
    # the parsed file: Compose interpolates values, not comments
    used = {
        name for text in scalars(yaml.safe_load(stack.compose_text)) for name in references(text)
    }
    plain = {name for name in used if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)}
    problems = [
        f"${{{name}}}: a default or modifier; put the value in .env.example"
        for name in sorted(used - plain)
    ]
    problems += [
        f"${{{name}}} is not defined in .env.example" for name in sorted(plain - set(stack.env))
    ]
    problems += [
        f".env.example defines {name}, which docker-compose.yml never uses"
        for name in sorted(set(stack.env) - plain)
    ]
    return problems


def secret_problems(stack: Stack) -> list[str]:
    """docker-compose.yml holds references to .env, never a secret's value."""
    problems = []
    for name, service in services(stack.compose).items():
        for key, value in environment(service).items():
            where = f"{name}: {key}"
            secret_name = SECRET_KEY_NAME.search(key) and not NOT_A_SECRET_VALUE.search(key)
            if secret_name and not ONLY_REFERENCES.fullmatch(value.strip()):
                problems.append(f"{where} is not a ${{VAR}} reference")
            for match in URL_USERINFO.finditer(value):
                _, _, password = match["userinfo"].partition(":")
                if password and not ONLY_REFERENCES.fullmatch(password):
                    problems.append(f"{where} has a literal password in a URL")
            for match in JSON_SECRET_PAIR.finditer(value):
                if match["value"] and not ONLY_REFERENCES.fullmatch(match["value"]):
                    problems.append(f"{where} has a literal {match['key']}")
            literal = REFERENCE.sub(" ", value)
            for candidate in HIGH_ENTROPY.findall(literal):
                if re.search(r"\d", candidate) and re.search(r"[A-Za-z]", candidate):
                    problems.append(f"{where} holds a key-like literal {candidate[:6]}...")
    secrets = {v for k, v in stack.env.items() if SECRET_KEY_NAME.search(k) and len(v) >= 6}
    problems += [
        "docker-compose.yml contains the value of a secret from .env.example"
        for secret in secrets
        if secret in stack.compose_text
    ]
    return problems


def airflow_env_problems(stack: Stack) -> list[str]:
    problems = []
    found = airflow_services(stack.compose)
    missing_components = set(AIRFLOW_COMPONENTS) - set(found.values())
    problems += [f"no service runs the Airflow {c}" for c in sorted(missing_components)]
    wanted = AIRFLOW_ENV | (set(stack.code_env) - set(NOT_FOR_THE_STACK))
    shared: dict[str, set[str]] = {}
    for name in found:
        env = resolved_env(stack, name)
        for var in sorted(wanted):
            if not env.get(var):
                problems.append(
                    f"{name}: {var} is not set (set it in docker-compose.yml, or list it in "
                    "NOT_FOR_THE_STACK in tests/unit/test_compose.py with the reason)"
                )
        if env.get("AIRFLOW__CORE__LOAD_EXAMPLES", "").lower() not in ("false", "0", "f"):
            problems.append(f"{name}: AIRFLOW__CORE__LOAD_EXAMPLES must be False")
        for var in AIRFLOW_SHARED_SETTINGS:
            shared.setdefault(var, set()).add(env.get(var, ""))
        api = urlsplit(env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", ""))
        api_servers = [n for n, c in found.items() if c == "api-server"]
        if api.hostname not in api_servers or (api.port or 80) != 8080:
            problems.append(
                f"{name}: the Execution API URL does not point at {api_servers} port 8080"
            )
    problems += [
        f"Airflow components disagree on {var}" for var, values in shared.items() if len(values) > 1
    ]
    for name, service in services(stack.compose).items():
        problems += [f"{name}: sets {var}" for var in sorted(NEVER_SET & set(environment(service)))]
    return problems


def spark_worker_env_problems(stack: Stack) -> list[str]:
    workers = spark_workers(stack.compose)
    problems = [] if workers else ["no spark-worker service"]
    for name in workers:
        env = resolved_env(stack, name)
        problems += [
            f"{name}: {var} is not set" for var in sorted(SPARK_WORKER_ENV) if not env.get(var)
        ]
    return problems


def connection_problems(stack: Stack) -> list[str]:
    """The broker connection matches the environment, the bucket and the account minio-init makes."""
    problems = []
    creators = [
        n
        for n, s in services(stack.compose).items()
        if "BROKER_S3_BUCKET" in environment(s) and n in one_shots(stack.compose)
    ]
    if not creators:
        return ["no one-shot service creates the bucket (BROKER_S3_BUCKET)"]
    bucket_env = resolved_env(stack, creators[0])
    for name in airflow_services(stack.compose):
        env = resolved_env(stack, name)
        try:
            conn = json.loads(env.get("AIRFLOW_CONN_TXN_BROKER_DEFAULT", ""))
            extra = conn["extra"]
        except (ValueError, KeyError, TypeError):
            problems.append(
                f"{name}: AIRFLOW_CONN_TXN_BROKER_DEFAULT is not a JSON connection with extra"
            )
            continue
        expected = {
            "database_url": env.get("TXN_BROKER_DATABASE_URL"),
            "storage_url": env.get("TXN_BROKER_STORAGE_URL"),
            "endpoint_url": env.get("TXN_BROKER_S3_ENDPOINT_URL"),
            "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID"),
            "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY"),
        }
        if conn.get("conn_type") != "txn_broker":
            problems.append(
                f"{name}: the broker connection's conn_type is {conn.get('conn_type')!r}"
            )
        problems += [
            f"{name}: connection extra {k} differs from the environment"
            for k, v in expected.items()
            if extra.get(k) != v
        ]
        storage = urlsplit(env.get("TXN_BROKER_STORAGE_URL", ""))
        if (
            storage.scheme != "s3"
            or storage.hostname != bucket_env["BROKER_S3_BUCKET"].lower()
            or storage.path != "/segments"
        ):
            problems.append(
                f"{name}: storage is not s3://<the bucket {creators[0]} creates>/segments"
            )
        if env.get("AWS_ACCESS_KEY_ID") != bucket_env.get("BROKER_S3_ACCESS_KEY_ID"):
            problems.append(f"{name}: uses an S3 account other than the one {creators[0]} creates")
        endpoint = urlsplit(env.get("TXN_BROKER_S3_ENDPOINT_URL", ""))
        if endpoint.hostname and endpoint.hostname not in services(stack.compose):
            problems.append(f"{name}: the S3 endpoint {endpoint.hostname} is not a service")
    return problems


def database_role_problems(stack: Stack) -> list[str]:
    """Migrations as the owner role, everything else as the client role, Airflow apart."""
    db_services = [
        n for n, s in services(stack.compose).items() if "BROKER_OWNER_USER" in environment(s)
    ]
    if not db_services:
        return ["no service provisions the broker's login users (BROKER_OWNER_USER)"]
    users = resolved_env(stack, db_services[0])
    problems = []
    migrators = broker_migrators(stack.compose)
    if not migrators:
        problems.append("no one-shot service runs `txn-broker db upgrade`")
    for name in migrators:
        url = resolved_env(stack, name).get("TXN_BROKER_DATABASE_URL", "")
        if url_user(url) != users["BROKER_OWNER_USER"]:
            problems.append(f"{name}: migrates as {url_user(url)!r}, not the owner login")
    for name in [*airflow_services(stack.compose), *spark_workers(stack.compose)]:
        env = resolved_env(stack, name)
        url = env.get("TXN_BROKER_DATABASE_URL", "")
        if url_user(url) != users["BROKER_CLIENT_USER"]:
            problems.append(f"{name}: uses the broker as {url_user(url)!r}, not the client login")
        if urlsplit(url).path != "/txn_broker":
            problems.append(f"{name}: the broker database is not txn_broker")
        if name in airflow_services(stack.compose):
            meta = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
            if url_user(meta) != users["AIRFLOW_DB_USER"] or urlsplit(meta).path != "/airflow":
                problems.append(
                    f"{name}: Airflow's metadata is not the airflow database as its own user"
                )
            warehouse = env.get("TXN_BROKER_WAREHOUSE_URL", "")
            if (
                url_user(warehouse) != users["WAREHOUSE_DB_USER"]
                or urlsplit(warehouse).path != "/warehouse"
            ):
                problems.append(
                    f"{name}: the warehouse is not the warehouse database as its own user"
                )
    distinct = {
        users["BROKER_OWNER_USER"],
        users["BROKER_CLIENT_USER"],
        users["BROKER_MONITOR_USER"],
        users["AIRFLOW_DB_USER"],
    }
    if len(distinct) != 4:
        problems.append("the owner, client, monitor and Airflow logins are not four distinct users")
    return problems


def mount_problems(stack: Stack) -> list[str]:
    problems = []
    for name in airflow_services(stack.compose):
        service = services(stack.compose)[name]
        env = environment(service)
        wanted = {
            "dags": env.get("AIRFLOW__CORE__DAGS_FOLDER", "/opt/airflow/dags"),
            "plugins": env.get("AIRFLOW__CORE__PLUGINS_FOLDER", "/opt/airflow/plugins"),
        }
        have = {
            (repo_path(source), posixpath.normpath(target)) for source, target in mounts(service)
        }
        for folder, target in wanted.items():
            if ((REPO / folder).resolve(), posixpath.normpath(target)) not in have:
                problems.append(f"{name}: ./{folder} is not mounted at {target}")
    for name, service in services(stack.compose).items():
        for source, _ in mounts(service):
            path = repo_path(source)
            if path is not None and path.suffix and not path.is_file():
                problems.append(f"{name}: mounts {source}, which does not exist")
    return problems


def spark_master_problems(stack: Stack) -> list[str]:
    master = spark_master(stack.compose)
    if master is None:
        return ["no service runs the Spark master"]
    name, service = master
    args = invocation(service)

    def option(*flags: str) -> str | None:
        for i, arg in enumerate(args[:-1]):
            if arg in flags:
                return args[i + 1]
        return None

    port = int(
        option("--port", "-p")
        or environment(service).get("SPARK_MASTER_PORT")
        or DEFAULT_SPARK_MASTER_PORT
    )
    host = option("--host", "-h")
    problems = []
    if host not in (None, name, service.get("hostname")):
        problems.append(f"{name}: the master binds to {host}, which is not its service name")
    url = f"spark://{name}:{port}"
    for airflow in airflow_services(stack.compose):
        env = resolved_env(stack, airflow)
        for var in ("TXN_BROKER_SPARK_MASTER", "AIRFLOW_CONN_SPARK_DEFAULT"):
            if env.get(var) != url:
                problems.append(f"{airflow}: {var}={env.get(var)!r}, the master is {url}")
    for worker in spark_workers(stack.compose):
        if url not in invocation(services(stack.compose)[worker]):
            problems.append(f"{worker}: does not register with {url}")
    return problems


# Dockerfile --------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    instructions, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def dockerignore_excludes(patterns: tuple[str, ...], path: str) -> bool:
    """Whether .dockerignore keeps ``path`` out of the build context (last match wins;
    a pattern matching a parent directory matches everything below it)."""

    def regex(pattern: str) -> re.Pattern[str]:
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            elif pattern[i] == "[" and "]" in pattern[i:]:
                end = pattern.index("]", i)
                body = pattern[i + 1 : end]
                out, i = (
                    out + "[" + ("^" + body[1:] if body.startswith("!") else body) + "]",
                    end + 1,
                )
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return re.compile(out + r"\Z")

    parts = path.strip("/").split("/")
    excluded = False
    for raw in patterns:
        negated = raw.startswith("!")
        pattern = posixpath.normpath(raw[1:] if negated else raw).lstrip("/")
        compiled = regex(pattern)
        if any(compiled.match("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            excluded = not negated
    return excluded


def dockerfile_problems(stack: Stack) -> list[str]:
    problems = []
    args: dict[str, str] = {}
    base = None
    cwd = "/"
    copied: dict[str, str] = {}  # repo source -> absolute path in the image
    pip_runs: list[tuple[str, list[str]]] = []
    java = False
    for keyword, rest in dockerfile_instructions(stack.dockerfile):
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip("\"'")
        elif keyword == "FROM":
            base = re.sub(
                r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), rest.split()[0]
            )
        elif keyword == "WORKDIR":
            cwd = posixpath.normpath(posixpath.join(cwd, rest.strip()))
        elif keyword in ("COPY", "ADD"):
            words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            if any(w.startswith("--from") for w in words):
                continue
            paths = [w for w in words if not w.startswith("--")]
            sources, dest = paths[:-1], paths[-1]
            target = posixpath.normpath(posixpath.join(cwd, dest))
            into_dir = dest.endswith("/") or len(sources) > 1
            for source in sources:
                clean = source.rstrip("/")
                is_dir = (REPO / clean).is_dir() or source.endswith("/")
                copied[clean] = (
                    posixpath.join(target, posixpath.basename(clean))
                    if into_dir and not is_dir
                    else target
                )
                if dockerignore_excludes(stack.dockerignore, clean):
                    problems.append(
                        f"COPY {source}: excluded from the build context by .dockerignore"
                    )
        elif keyword == "RUN":
            java = java or bool(re.search(r"openjdk-(1[7-9]|[2-9]\d)-j", rest))
            run_cwd = cwd
            script = re.sub(r"^(--\S+\s+)+", "", rest)  # RUN's own flags (--mount=...)
            for command in re.split(r"&&|;|\|\|", script):
                try:
                    words = shlex.split(command)
                except ValueError:  # nested quotes in $(...): plain words will do
                    words = command.split()
                if words[:1] == ["cd"] and len(words) > 1:
                    run_cwd = posixpath.normpath(posixpath.join(run_cwd, words[1]))
                for i in range(len(words) - 1):
                    if words[i] == "pip" and words[i + 1] == "install":
                        pip_runs.append((run_cwd, words[i + 2 :]))

    constraints_pin = re.search(
        r"^apache-airflow==(\S+)$",
        (REPO / "constraints.txt").read_text(encoding="utf-8"),
        re.MULTILINE,
    )
    expected_base = (
        f"apache/airflow:{constraints_pin.group(1) if constraints_pin else '3.3.2'}-python3.11"
    )
    if base != expected_base:
        problems.append(
            f"the image is based on {base}, not {expected_base} (constraints.txt's Airflow)"
        )
    if not java:
        problems.append("no RUN installs a Java 17+ runtime (openjdk-17-jre-headless) for PySpark")

    def installs_project(run_cwd: str, words: list[str]) -> bool:
        constraint = None
        for i, word in enumerate(words):
            if word in ("-c", "--constraint") and i + 1 < len(words):
                constraint = words[i + 1]
            elif word.startswith("--constraint="):
                constraint = word.split("=", 1)[1]
        project = [w for w in words if w == "." or w.startswith(".[")]
        extras = set(re.findall(r"\w+", project[0][1:])) if project else set()
        return (
            constraint is not None
            and copied.get("constraints.txt")
            == posixpath.normpath(posixpath.join(run_cwd, constraint))
            and bool(project)
            and {"airflow", "spark"} <= extras
            and copied.get("pyproject.toml") == posixpath.join(run_cwd, "pyproject.toml")
            and copied.get("txn_broker") == posixpath.join(run_cwd, "txn_broker")
            and copied.get("sql") == posixpath.join(run_cwd, "sql")
            and copied.get("plugins/txn_broker_airflow") == posixpath.join(run_cwd, "plugins/txn_broker_airflow")
        )

    if not any(installs_project(run_cwd, words) for run_cwd, words in pip_runs):
        problems.append(
            'no `pip install -c constraints.txt ".[airflow,spark]"` runs where pyproject.toml, '
            "constraints.txt, txn_broker/, sql/ and plugins/txn_broker_airflow/ were copied"
        )
    if not dockerignore_excludes(stack.dockerignore, ".env"):
        problems.append(".dockerignore lets .env into the build context")
    return problems


# The process topology (tests/e2e/topology.py) --------------------------------------


def topology_problems(stack: Stack) -> list[str]:
    """The end-to-end topology test runs what the stack deploys: the runner builds every
    process from this compose file and .env.example; here we check that it can (every
    service is started or knowingly replaced, every address it names can be moved to
    loopback), that it changes nothing but what it documents, and that the stack is the
    distributed one the test's faults need (Celery through Redis, two workers of each)."""
    import sys
    import tempfile

    e2e = str(REPO / "tests" / "e2e")
    if e2e not in sys.path:
        sys.path.insert(0, e2e)
    import topology as topo

    problems = []
    runner = topo.Topology(Path(tempfile.mkdtemp(prefix="compose-check-")), topo.Settings(stack.compose, stack.env))
    runner.bind(5432, "http://127.0.0.1:9000")
    all_services = services(stack.compose)
    try:
        plan = runner.plan()
    except (KeyError, ValueError) as error:
        return [f"the topology runner cannot read the stack: {error!r}"]
    started = set(plan.values())
    for name in sorted(set(all_services) - started - set(topo.REPLACED)):
        problems.append(f"{name}: neither started by tests/e2e/topology.py nor in its REPLACED")
    for name in sorted(started - set(all_services)):
        problems.append(f"the topology runner starts {name}, which the stack does not have")
    for service, least in ((topo.AIRFLOW_WORKER, 2), (topo.SPARK_WORKER, 2)):
        count = sum(1 for s in plan.values() if s == service)
        if count < least:
            problems.append(f"{service}: {count} replica(s); the topology test's faults need {least}")
    others = set(all_services) - {"postgres", "minio"}  # those two are reached through variables
    for process, service in sorted(plan.items()):
        if service not in all_services:
            continue
        cmd, env = runner.process(process)
        declared = resolved_env(stack, service)
        for var in sorted(set(declared) & set(topo.TEST_TUNING)):
            problems.append(f"{service}: sets {var}, which the topology test overrides (TEST_TUNING)")
        for var in declared:
            if var in topo.LOCAL_ENV:
                continue
            if var not in env:
                problems.append(f"{process}: the runner drops {var}")
            for other in others:
                if re.search(rf"//{re.escape(other)}:\d+", env.get(var, "")):
                    problems.append(f"{process}: {var} names {other}, an address the runner cannot move "
                                    "to loopback (add it to ADDRESSES in tests/e2e/topology.py)")
        if service.startswith("airflow") and service != "airflow-init":
            if env.get("AIRFLOW__CORE__EXECUTOR") != "CeleryExecutor":
                problems.append(f"{service}: executor {env.get('AIRFLOW__CORE__EXECUTOR')!r}, not CeleryExecutor")
            broker = declared.get("AIRFLOW__CELERY__BROKER_URL", "")
            if not re.match(r"redis://redis:6379(/|$)", broker):
                problems.append(f"{service}: the Celery broker is {broker!r}, not the redis service")
    worker = all_services.get(topo.AIRFLOW_WORKER) or {}
    if tokens(worker.get("command"))[:2] != ["celery", "worker"]:
        problems.append(f"{topo.AIRFLOW_WORKER}: does not run `airflow celery worker`")
    return problems


# --------------------------------------------------------------------------- tests

CHECKS: dict[str, Callable[[Stack], list[str]]] = {
    "build": build_problems,
    "healthcheck": healthcheck_problems,
    "depends_on": depends_on_problems,
    "env_example": env_example_problems,
    "secrets": secret_problems,
    "airflow_env": airflow_env_problems,
    "spark_worker_env": spark_worker_env_problems,
    "connection": connection_problems,
    "database_roles": database_role_problems,
    "mounts": mount_problems,
    "spark_master": spark_master_problems,
    "dockerfile": dockerfile_problems,
    "topology": topology_problems,
}


def test_compose_matches_the_compose_specification(stack: Stack) -> None:
    assert schema_problems(stack) == []


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_stack(stack: Stack, check: str) -> None:
    assert CHECKS[check](stack) == []


def test_code_env_vars_reach_airflow(stack: Stack) -> None:
    """The scan sees the variables the library reads today; each is set or excused."""
    assert {
        "TXN_BROKER_DATABASE_URL",
        "TXN_BROKER_STORAGE_URL",
        "TXN_BROKER_S3_ENDPOINT_URL",
    } <= stack.code_env
    env = environment(services(stack.compose)[next(iter(airflow_services(stack.compose)))])
    assert sorted(stack.code_env - set(NOT_FOR_THE_STACK) - set(env)) == []


def test_scan_finds_reads_not_mentions(tmp_path: Path) -> None:
    (tmp_path / "settings.py").write_text(
        '"""Reads TXN_BROKER_IN_DOCSTRING."""\nimport os\n'
        'NAME = "TXN_BROKER_INDIRECT"\n'
        'a = os.environ.get("TXN_BROKER_NEW_SETTING", "x")\nb = os.getenv(NAME)\n'
        'c = f"TXN_BROKER_{a}"\n'
    )
    (tmp_path / "broken.py").write_text('x = os.environ["TXN_BROKER_HALF_WRITTEN"\n')
    assert scan_code_env([tmp_path, tmp_path / "missing"]) == {
        "TXN_BROKER_NEW_SETTING",
        "TXN_BROKER_INDIRECT",
        "TXN_BROKER_HALF_WRITTEN",
    }


def test_the_readers_of_the_file_see_the_services(stack: Stack) -> None:
    """Guards the helpers the checks rely on, so an empty selection cannot pass."""
    compose = stack.compose
    assert sorted(airflow_services(compose).values()) == sorted(AIRFLOW_COMPONENTS)
    assert spark_master(compose) is not None and spark_workers(compose)
    assert broker_migrators(compose) and one_shots(compose) >= set(broker_migrators(compose))
    assert "postgres" in services(compose) and "minio" in services(compose)


# Each check must be able to fail: break the stack in one way, expect that check to say so.


Change = Callable[[dict[str, Any]], None]


def _env(service: str, var: str, value: str | None = None) -> Change:
    """Set (or, with no value, remove) one variable of one service."""

    def change(compose: dict[str, Any]) -> None:
        env = dict(compose["services"][service]["environment"])  # anchors share the dict
        if value is None:
            del env[var]
        else:
            env[var] = value
        compose["services"][service]["environment"] = env

    return change


def _set(path: str, value: Any) -> Change:
    """Set (or, with None, remove) the node at a slash-separated path."""

    def change(compose: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = compose
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value

    return change


OWNER_URL = "postgresql://${BROKER_OWNER_USER}:${BROKER_OWNER_PASSWORD}@postgres:5432/txn_broker"
CLIENT_URL = "postgresql://${BROKER_CLIENT_USER}:${BROKER_CLIENT_PASSWORD}@postgres:5432/txn_broker"

# fmt: off
BREAKAGES: list[tuple[str, str, Change]] = [
    ("build", "missing context", _set("services/spark-worker/build", {"context": "no-such-dir"})),
    ("healthcheck", "no health check", _set("services/minio/healthcheck", None)),
    ("healthcheck", "one-shot restarts", _set("services/broker-init/restart", "always")),
    ("depends_on", "waits for start", _set("services/minio-init/depends_on/minio/condition", "service_started")),
    ("depends_on", "list form", _set("services/broker-init/depends_on", ["postgres"])),
    ("depends_on", "cycle", _set("services/postgres/depends_on", {"broker-init": {"condition": "service_completed_successfully"}})),  # noqa: E501
    ("depends_on", "unknown service", _set("services/broker-init/depends_on", {"pg": {"condition": "service_healthy"}})),  # noqa: E501
    ("airflow_env", "storage unset", _env("airflow-scheduler", "TXN_BROKER_STORAGE_URL")),
    ("airflow_env", "examples loaded", _env("airflow-triggerer", "AIRFLOW__CORE__LOAD_EXAMPLES", "True")),
    ("airflow_env", "secrets disagree", _env("airflow-api-server", "AIRFLOW__API_AUTH__JWT_SECRET", "${AIRFLOW_API_SECRET_KEY}")),  # noqa: E501
    ("airflow_env", "faults injected", _env("spark-worker", "TXN_BROKER_FAULTS", "commit.after_prepare=kill")),
    ("spark_worker_env", "no credentials", _env("spark-worker", "AWS_SECRET_ACCESS_KEY")),
    ("connection", "wrong bucket", _env("airflow-scheduler", "TXN_BROKER_STORAGE_URL", "s3://other/segments")),
    ("connection", "not JSON", _env("airflow-dag-processor", "AIRFLOW_CONN_TXN_BROKER_DEFAULT", "txn_broker://x")),
    ("database_roles", "migrates as client", _env("broker-init", "TXN_BROKER_DATABASE_URL", CLIENT_URL)),
    ("database_roles", "tasks as owner", _env("airflow-scheduler", "TXN_BROKER_DATABASE_URL", OWNER_URL)),
    ("mounts", "dags elsewhere", _set("services/airflow-dag-processor/volumes", ["./dags:/dags", "./plugins:/opt/airflow/plugins"])),  # noqa: E501
    ("mounts", "missing script", _set("services/minio-init/volumes", ["./docker/minio/nope.sh:/x.sh:ro"])),
    ("spark_master", "wrong port", _env("airflow-scheduler", "TXN_BROKER_SPARK_MASTER", "spark://spark-master:7078")),
    ("spark_master", "wrong host", _env("airflow-triggerer", "AIRFLOW_CONN_SPARK_DEFAULT", "spark://spark:7077")),
    ("secrets", "literal password", _env("broker-init", "TXN_BROKER_DATABASE_URL", "postgresql://o:hunter2@postgres/txn_broker")),
    ("secrets", "literal secret", _env("minio", "MINIO_ROOT_PASSWORD", "dev-only-minio-root")),
    ("secrets", "literal key", _env("spark-worker", "SPARK_OPTS", "k=a8f3b29c7d1e4f6a9b2c8d0e5f7a1b3c")),
    ("topology", "one airflow worker", _set("services/airflow-worker/deploy/replicas", 1)),
    ("topology", "one spark worker", _set("services/spark-worker/deploy", None)),
    ("topology", "local executor", _env("airflow-scheduler", "AIRFLOW__CORE__EXECUTOR", "LocalExecutor")),
    ("topology", "broker elsewhere", _env("airflow-worker", "AIRFLOW__CELERY__BROKER_URL", "redis://cache:6379/0")),
    ("topology", "unknown address", _env("airflow-worker", "TXN_BROKER_SPARK_MASTER", "spark://redis:7000")),
    ("topology", "tuning in the stack", _env("airflow-scheduler", "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE", "True")),
    ("topology", "a service not run", _set("services/flower", {"image": "x", "command": ["celery", "flower"]})),
]
# fmt: on


@pytest.mark.parametrize(
    ("check", "breakage", "change"), BREAKAGES, ids=[f"{c}-{b}" for c, b, _ in BREAKAGES]
)
def test_check_catches(stack: Stack, check: str, breakage: str, change: Change) -> None:
    assert CHECKS[check](mutated(stack, change)) != []


def test_schema_check_catches_an_unknown_key(stack: Stack) -> None:
    assert schema_problems(mutated(stack, _set("services/postgres/healthcheck/every", "5s"))) != []


@pytest.mark.parametrize(
    ("breakage", "text_change"),
    [
        (
            "undefined variable",
            lambda t: t.replace("${SPARK_WORKER_CORES}", "${SPARK_WORKER_THREADS}"),
        ),
        (
            "default in the file",
            lambda t: t.replace("${SPARK_WORKER_CORES}", "${SPARK_WORKER_CORES:-2}"),
        ),
        ("unused setting", lambda t: t.replace("${SPARK_WORKER_CORES}", "2")),
    ],
)
def test_env_example_check_catches(
    stack: Stack, breakage: str, text_change: Callable[[str], str]
) -> None:
    broken = replace(stack, compose_text=text_change(stack.compose_text))
    assert broken.compose_text != stack.compose_text
    assert env_example_problems(broken) != []


def test_secret_check_catches_a_dev_default_in_the_file(stack: Stack) -> None:
    text = stack.compose_text + f"\n# {stack.env['BROKER_CLIENT_PASSWORD']}\n"
    assert secret_problems(replace(stack, compose_text=text)) != []


def test_airflow_env_check_catches_a_new_code_variable(stack: Stack) -> None:
    broken = replace(stack, code_env=stack.code_env | {"TXN_BROKER_SOMETHING_NEW"})
    assert any("TXN_BROKER_SOMETHING_NEW" in p for p in airflow_env_problems(broken))


@pytest.mark.parametrize(
    ("breakage", "edit"),
    [
        ("no constraints", lambda d: d.replace("-c constraints.txt ", "")),
        (
            "installs from PyPI",
            lambda d: d.replace('".[airflow,spark]"', "txn-broker[airflow,spark]"),
        ),
        ("no spark extra", lambda d: d.replace('".[airflow,spark]"', '".[airflow]"')),
        ("sql not copied", lambda d: d.replace("COPY --chown=airflow:0 sql/ sql/", "")),
        ("installs elsewhere", lambda d: d.replace("    pip install", "    cd / && pip install")),
        ("copied elsewhere", lambda d: d.replace(" README.md ./", " README.md /tmp/")),
        ("other base", lambda d: d.replace("apache/airflow:3.3.2-python3.11", "python:3.11-slim")),
        ("no Java", lambda d: d.replace("openjdk-17-jre-headless", "curl")),
    ],
)
def test_dockerfile_check_catches(stack: Stack, breakage: str, edit: Callable[[str], str]) -> None:
    broken = replace(stack, dockerfile=edit(stack.dockerfile))
    assert broken.dockerfile != stack.dockerfile
    assert dockerfile_problems(broken) != []


def test_dockerignore_check_catches(stack: Stack) -> None:
    assert dockerfile_problems(replace(stack, dockerignore=(*stack.dockerignore, "sql"))) != []
    assert (
        dockerfile_problems(replace(stack, dockerignore=("**/__pycache__",))) != []
    )  # .env let in


def test_dockerignore_matching() -> None:
    patterns = ("*", "!txn_broker/", "!docker/airflow/", "**/__pycache__", "**/.env")
    assert not dockerignore_excludes(patterns, "txn_broker/storage/s3.py")
    assert not dockerignore_excludes(patterns, "docker/airflow/airflow-init.sh")
    assert dockerignore_excludes(patterns, "docker/postgres/init-databases.sh")
    assert dockerignore_excludes(patterns, "txn_broker/__pycache__/x.pyc")
    assert dockerignore_excludes(patterns, ".env")
    assert dockerignore_excludes(patterns, ".git/config")
