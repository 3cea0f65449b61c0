"""librdkafka's own test suite against `txn-broker serve`: a measurement, not part of
`make test` (it needs librdkafka's sources, built, and takes an hour or more on two cores).

Build librdkafka and its test runner first (from its public repository, at the release to
measure; Debian's build-essential, zlib1g-dev, libssl-dev, libsasl2-dev, libzstd-dev and
liblz4-dev stand in for ``./configure --install-deps``):

    ./configure --disable-curl --disable-gssapi && make libs && make -C tests build

then run, from this repository:

    .venv/bin/python scripts/librdkafka_suite.py /path/to/librdkafka --out results.md
    .venv/bin/python scripts/librdkafka_suite.py /path/to/librdkafka 0054 0103 --json

Each test number runs alone (``test-runner -L -V 3.7.0 -s SCENARIO NUMBER``; not quick mode,
``-Q``, which skips most subtests; the runner's local and mock tests left out) against a fresh
listener
on a fresh SQLite database and local directory, with ``--auto-create-topics`` for the tests
of librdkafka's ``default`` scenario (which expects a broker that creates topics) and without
it for those of ``noautocreate``. Tests that need no broker (TEST_F_LOCAL, the mock cluster),
and tests marked manual or known-issue upstream, are not run. A test the runner skips itself
(it needs SASL or SSL configured, or a broker version newer than 3.7.0: the share consumer
tests) is reported as skipped. With ``--sasl`` the listener requires SASL/PLAIN and enforces
ACLs (``--sasl-users``, ``--allow-everyone-if-no-acl-found``: Kafka's authoriser as librdkafka's
CI configures it) and test.conf carries its user: for the tests that need an authoriser, e.g.
0081's ACL subtests:

    .venv/bin/python scripts/librdkafka_suite.py /path/to/librdkafka 0081 --sasl --json

The table says, for each test run, passed or failed, its time,
and for failures and skips the reason from ``REASONS`` below, where one is known.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KAFKA_VERSION = "3.7.0"

#: why a test fails or is skipped against a single listener, where it is understood
KAFKA_TOOLS = "needs Kafka's own tools (KAFKA_PATH: kafka-topics.sh, kafka-configs.sh)"
NO_RAPIDJSON = "skipped by the runner: built without RapidJSON (Debian's rapidjson-dev)"
REASONS: dict[str, str] = {
    "0011_produce_batch": "documented difference: cleanup.policy=compact is accepted and ignored (records "
                          "without a key are not refused)",
    "0045_subscribe_update_topic_remove": KAFKA_TOOLS,
    "0045_subscribe_update_non_exist_and_partchange": KAFKA_TOOLS,
    "0052_msg_timestamps": KAFKA_TOOLS,
    "0053_stats": NO_RAPIDJSON,
    "0061_consumer_lag": "documented difference: markers take no offset, lag 12 where Kafka says 13",
    "0077_compaction": KAFKA_TOOLS,
    "0097_ssl_verify": "needs SSL configured in test.conf",
    "0098_consumer_txn": NO_RAPIDJSON,
    "0101_fetch_from_follower": "needs several brokers with racks (fetch from follower)",
    "0103_transactions": "documented difference: markers take no offset (txn_abort_control_message: "
                         "committed offset 1 where Kafka's is 2)",
    "0109_auto_create_topics": KAFKA_TOOLS,
    "0110_batch_size": NO_RAPIDJSON,
    "0115_producer_auth": "needs kafka-acls.sh (KAFKA_PATH) and a PLAINTEXT broker with an authoriser "
                          "(it skips itself with SASL)",
    "0119_consumer_auth": "needs kafka-acls.sh (KAFKA_PATH) and a PLAINTEXT broker with an authoriser "
                          "(it skips itself with SASL)",
    "0126_oauthbearer_oidc": "needs an OAUTHBEARER/OIDC token endpoint",
    "0135_sasl_credentials": "needs SASL (run it with --sasl); its share consumer subtest needs a 4.x broker",
    "0137_barrier_batch_consume": "documented difference: markers take no offset (offset 5 where Kafka's is 7)",
    "0142_reauthentication": "needs SASL (--sasl) and KIP-368 re-authentication (connections.max.reauth.ms), "
                             "which the listener does not have",
}


@dataclass
class Result:
    test: str
    outcome: str  # passed, failed, skipped, timeout
    seconds: float
    detail: str


def broker_tests(librdkafka: Path) -> list[tuple[str, str]]:
    """(name, scenario) of every test of test.c that talks to a real broker."""
    source = (librdkafka / "tests" / "test.c").read_text()
    body = source[source.index("struct test tests[]"):]
    out = []
    entries = list(re.finditer(r"_TEST\((\w+),", body))
    for entry, after in zip(entries, [*entries[1:], None], strict=True):
        name = entry.group(1)
        flags = " ".join(body[entry.end():after.start() if after else None].split())
        if re.search(r"TEST_F_LOCAL|TEST_F_MANUAL|TEST_F_KNOWN_ISSUE\b", flags) or "mock" in name:
            continue
        match = re.search(r'\.scenario = "([^"]+)"', flags)
        out.append((name, match.group(1) if match else "default"))
    return out


#: the SASL/PLAIN user of ``--sasl`` runs (the listener's only user)
SASL_USER, SASL_PASSWORD = "rdkafka", "rdkafka-secret"


def start_listener(workdir: Path, auto_create: bool, sasl: bool = False) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TXN_BROKER_DATABASE_URL": f"sqlite:///{workdir}/broker.db",
           "TXN_BROKER_STORAGE_URL": (workdir / "segments").as_uri()}
    # librdkafka's scenarios (tests/scenarios/*.json) expect num.partitions=4
    args = [sys.executable, "-m", "txn_broker.cli", "serve", "--listen", "127.0.0.1:0", "--default-partitions", "4"]
    if auto_create:
        args += ["--auto-create-topics"]
    if sasl:  # an authoriser, as Kafka's with allow.everyone.if.no.acl.found (librdkafka's CI)
        users = workdir / "users.txt"
        users.write_text(f"{SASL_USER}:{SASL_PASSWORD}\n")
        args += ["--sasl-users", str(users), "--allow-everyone-if-no-acl-found"]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=open(workdir / "serve.log", "wb"), start_new_session=True)  # noqa: SIM115
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
    if not match:
        raise RuntimeError(f"serve did not start: {line!r}: {(workdir / 'serve.log').read_text()}")
    return proc, match.group(1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def run_group(librdkafka: Path, number: str, scenario: str, names: list[str], timeout: float,
              sasl: bool = False) -> list[Result]:
    """Run the tests of one number and scenario (the runner selects tests by number) against
    a fresh listener; ``-L`` leaves out their local and mock siblings."""
    workdir = Path(tempfile.mkdtemp(prefix=f"rdk-{number}-"))
    try:
        from txn_broker import upgrade_schema

        upgrade_schema(f"sqlite:///{workdir}/broker.db")
        listener, bootstrap = start_listener(workdir, auto_create=scenario != "noautocreate", sasl=sasl)
        conf = workdir / "test.conf"
        conf.write_text(f"bootstrap.servers={bootstrap}\n" + (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\n"
            f"sasl.username={SASL_USER}\nsasl.password={SASL_PASSWORD}\n" if sasl else ""))
        env = {**os.environ, "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": KAFKA_VERSION,
               "LD_LIBRARY_PATH": f"{librdkafka}/src:{librdkafka}/src-cpp"}
        started = time.monotonic()
        try:
            run = subprocess.run(["./test-runner", "-L", "-V", KAFKA_VERSION, "-s", scenario, number],
                                 cwd=librdkafka / "tests", env=env, capture_output=True, timeout=timeout,
                                 start_new_session=True)
            output = (run.stdout + run.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            output = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace") + "\nTIMEOUT"
        seconds = round(time.monotonic() - started, 1)
        stop(listener)
        output = re.sub(r"\x1b\[[0-9;]*m", "", output)
        if os.environ.get("LIBRDKAFKA_SUITE_LOGS"):
            Path(os.environ["LIBRDKAFKA_SUITE_LOGS"], f"{number}-{scenario}.log").write_text(output)
        return [Result(name, outcome_of(name, output), seconds, REASONS.get(name, "") or first_failure(name, output))
                for name in names]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def outcome_of(name: str, output: str) -> str:
    """The runner's verdict on one test (its exit status is no guide: it may abort at exit)."""
    match = re.search(rf"=+ Test {re.escape(name)} (PASSED|FAILED|SKIPPED)", output)
    if match:
        return match.group(1).lower()
    if re.search(rf'### Test "{re.escape(name)}[" ]', output):
        return "failed"
    if "TIMEOUT" in output.splitlines()[-1:]:
        return "timeout"
    return "not run"


def first_failure(name: str, output: str) -> str:
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.search(rf'### Test "{re.escape(name)}[" ]', line):
            return " ".join(lines[i + 1:i + 2]).strip()[:200]
    return ""


def table(results: list[Result]) -> str:
    lines = ["| test | result | seconds | reason |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.test} | {r.outcome} | {r.seconds} | {r.detail.replace('|', '/')} |" for r in results]
    counts = {o: sum(r.outcome == o for r in results) for o in ("passed", "failed", "timeout", "skipped", "not run")}
    lines.append("")
    lines.append(", ".join(f"{n} {o}" for o, n in counts.items()) + f" of {len(results)} run")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("librdkafka", type=Path, help="librdkafka's source tree, built with its tests")
    parser.add_argument("tests", nargs="*", help="test number prefixes to run (default: every broker test)")
    parser.add_argument("--timeout", type=float, default=1200,
                        help="seconds per test (default 1200: 0113 takes about 870 s on two cores)")
    parser.add_argument("--out", type=Path, help="write the table (Markdown) here as the tests finish")
    parser.add_argument("--sasl", action="store_true",
                        help="a listener with SASL/PLAIN and its authoriser (--sasl-users, "
                             "--allow-everyone-if-no-acl-found), and test.conf with its user: for the "
                             "tests that need an authoriser (0081's ACL subtests)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON lines")
    args = parser.parse_args()
    librdkafka = args.librdkafka.resolve()
    groups: dict[tuple[str, str], list[str]] = {}
    for name, scenarios in broker_tests(librdkafka):
        if args.tests and not any(name.startswith(t) for t in args.tests):
            continue
        scenario = scenarios.split(",")[0]
        groups.setdefault((name[:4], scenario), []).append(name)
    results: list[Result] = []
    for (number, scenario), names in groups.items():
        for result in run_group(librdkafka, number, scenario, names, args.timeout, args.sasl):
            results.append(result)
            print(json.dumps(asdict(result)) if args.json else f"{result.test}: {result.outcome} "
                  f"({result.seconds} s) {result.detail}", flush=True)
        if args.out:
            args.out.write_text(table(results) + "\n")
    if not args.json:
        print(table(results))
    return 0 if all(r.outcome in ("passed", "skipped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
