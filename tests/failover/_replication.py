"""PostgreSQL as a primary plus a streaming standby, two server processes on loopback, and
the failover a high-availability manager performs: the primary dies (every process of it
SIGKILLed, as when its machine fails), the standby is promoted, and clients that name
both hosts with ``target_session_attrs=read-write`` reach the new primary.

    cluster = ReplicatedPostgres(synchronous=True)
    url = cluster.new_database("broker")      # a multi-host URL naming both servers
    cluster.stall_replication()                # optional: the standby falls behind
    gap = cluster.fail_over()                  # SIGKILL the primary, promote the standby
    cluster.close()

Settings, and why:

* ``synchronous_standby_names = 'FIRST 1 (standby1)'`` on the primary, set with ALTER
  SYSTEM (``postgresql.auto.conf``) before the base backup, as an operator would have it
  in the configuration, so that the standby's copy carries it too: after promotion, the
  new primary would wait for a standby of its own forever. ``fail_over()`` resets it on
  the new primary (ALTER SYSTEM RESET and a reload), as failover managers do when no
  other standby is left. ``synchronous=False`` leaves it empty: an asynchronous standby.
* ``synchronous_commit = on``: a commit returns once its WAL is flushed on the primary and
  on the synchronous standby. ``remote_apply`` would also wait until the standby has
  replayed it, which only matters to clients that read from the standby; the broker reads
  and writes on the primary only (``target_session_attrs=read-write``), and a promoted
  standby replays every WAL record it flushed before it accepts writes, so ``on`` is
  enough for no acknowledged commit to be lost in a failover. ``remote_write`` would not
  survive the standby's operating system crashing together with the primary; ``local``
  and ``off`` do not wait for the standby at all.
* ``fsync=off`` stays (as in the rest of the suite): the processes die here, not the
  operating system, so what a server wrote survives in the page cache. Production keeps
  ``fsync=on``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from _servers import PostgresServer, _wait, free_port, pg_bin

STANDBY_NAME = "standby1"


class ReplicaNode(PostgresServer):
    """One server of the pair: ``PostgresServer``'s start, stop and URLs, over a data
    directory the cluster prepares (initdb for the primary, a base backup for the standby)."""

    synchronous_commit = "on"

    def __init__(self, root: Path) -> None:  # noqa: D107 (no initdb, no start: see ReplicatedPostgres)
        self.port = free_port()
        self.host = "127.0.0.1"
        self.root = root
        self.data = root / "data"
        self._as_postgres = os.geteuid() == 0
        root.mkdir()
        if self._as_postgres:
            shutil.chown(root, "postgres")

    def postmaster_pid(self) -> int | None:
        """The running postmaster of this data directory, else None. The pid file outlives
        a SIGKILLed server and its pid is soon another process's (pids wrap at 32768
        here), so the process must be a live postgres started on this very directory."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        ours = any(a == b"-D" and b == str(self.data).encode() for a, b in zip(args, args[1:], strict=False))
        return pid if ours and _exists(pid) else None

    def alive(self) -> bool:
        return self.postmaster_pid() is not None

    def crash(self) -> None:
        """SIGKILL the postmaster and every process it started, as when the machine dies:
        no backend finishes a commit, no WAL sender sends another byte."""
        pid = self.postmaster_pid()
        if pid is None:
            raise RuntimeError("the server is not running")
        os.kill(pid, signal.SIGSTOP)  # it can start no new process meanwhile
        for child in _children(pid):
            _kill(child)
        _kill(pid)
        deadline = time.monotonic() + 10
        while any(_exists(p) for p in [pid, *_children(pid)]) and time.monotonic() < deadline:
            time.sleep(0.01)
        # what a clean shutdown removes: the postmaster's small System V segment (its
        # key and id are on the pid file's seventh line)
        try:
            shmid = (self.data / "postmaster.pid").read_text().splitlines()[6].split()[1]
        except (OSError, IndexError):
            return
        subprocess.run(["ipcrm", "-m", shmid], capture_output=True)

    def scalar(self, statement: str) -> object:
        engine = sa.create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text(statement)).scalar()
        finally:
            engine.dispose()


class ReplicatedPostgres:
    """A primary and one streaming standby (synchronous unless ``synchronous=False``)."""

    user = PostgresServer.user
    password = PostgresServer.password

    def __init__(self, *, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        # in memory where there is a tmpfs: two data directories and their WAL, written and
        # deleted in seconds (deleting them from a disk mounted with online discard took
        # up to 10 s on a busy machine)
        shm = Path("/dev/shm")
        memory = shm.is_dir() and os.access(shm, os.W_OK)
        self.root = Path(tempfile.mkdtemp(prefix="txnb-repl-", dir=shm if memory else None))
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
        self.primary = ReplicaNode(self.root / "a")
        self.standby = ReplicaNode(self.root / "b")
        self._stalled: int | None = None
        self.promoted = False
        try:
            self._init_primary()
            self._init_standby()
        except BaseException:
            self.close()
            raise

    def _init_primary(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if self._as_postgres:
            shutil.chown(pwfile, "postgres")
        # initdb's pg_hba.conf lets 127.0.0.1 in for replication too (md5, with -A md5)
        self.primary._run(pg_bin("initdb"), "-D", str(self.primary.data), "-U", self.user, "-A", "md5",
                          f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync")
        self.primary.start()
        names = f"FIRST 1 ({STANDBY_NAME})" if self.synchronous else ""
        self.primary.admin(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'",
                           "SELECT pg_reload_conf()")

    def _init_standby(self) -> None:
        # -R: standby.signal plus primary_conninfo (with application_name, the name the
        # primary's synchronous_standby_names lists) in the copy's postgresql.auto.conf
        conninfo = (f"host={self.primary.host} port={self.primary.port} user={self.user} "
                    f"password={self.password} application_name={STANDBY_NAME}")
        self.standby._run(pg_bin("pg_basebackup"), "-D", str(self.standby.data), "-d", conninfo,
                          "-X", "stream", "-R", "--no-sync", "-c", "fast")
        auto = (self.standby.data / "postgresql.auto.conf").read_text()
        assert f"application_name={STANDBY_NAME}" in auto, auto
        self.standby.start()
        wanted = "sync" if self.synchronous else "async"
        _wait(lambda: self.primary.scalar(
            f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}' "
            "AND state = 'streaming'") == wanted, f"a {wanted} streaming standby")

    # -- clients ---------------------------------------------------------------------------

    def url(self, database: str) -> str:
        """Both servers, the writable one chosen at each connect (libpq multi-host)."""
        return (f"postgresql+psycopg2://{self.user}:{self.password}@/{database}"
                f"?host={self.primary.host}:{self.primary.port}&host={self.standby.host}:{self.standby.port}"
                "&target_session_attrs=read-write")

    def new_database(self, name: str | None = None) -> str:
        name = name or f"db_{uuid.uuid4().hex[:12]}"
        self.primary.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def replication_state(self) -> tuple[str, str] | None:
        """(state, sync_state) of the standby as the primary sees it."""
        engine = sa.create_engine(self.primary.url("postgres"))
        try:
            with engine.connect() as conn:
                row = conn.execute(sa.text(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = :n"),
                    {"n": STANDBY_NAME}).first()
                return None if row is None else (row[0], row[1])
        finally:
            engine.dispose()

    # -- faults ----------------------------------------------------------------------------

    def stall_replication(self) -> None:
        """Stop the primary's WAL sender (SIGSTOP): the standby falls behind. A synchronous
        primary's commits now wait; an asynchronous one's are acknowledged all the same.
        (Stopping the standby's receiver instead would not do: WAL already in its socket
        buffer would still arrive after it resumed.)"""
        pid = self.primary.scalar(
            f"SELECT pid FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'")
        if not isinstance(pid, int):
            raise RuntimeError("no WAL sender for the standby")
        os.kill(pid, signal.SIGSTOP)
        self._stalled = pid

    def crash_primary(self) -> None:
        """SIGKILL every process of the primary."""
        self.primary.crash()
        self._stalled = None  # died with the primary

    def promote(self) -> float:
        """Promote the standby and let it commit without a standby of its own; returns
        the seconds the reconfiguration took after the promotion."""
        self.standby._run(pg_bin("pg_ctl"), "-D", str(self.standby.data), "-w", "-t", "60", "promote")
        promoted = time.monotonic()
        # the standby's copy of synchronous_standby_names names a standby the new primary
        # does not have: until it is reset, every commit on the new primary would wait
        self.standby.admin("ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
        _wait(lambda: self.standby.scalar("SHOW synchronous_standby_names") == "", "the reload")
        assert self.standby.scalar("SELECT pg_is_in_recovery()") is False
        self.promoted = True
        return time.monotonic() - promoted

    def fail_over(self) -> dict[str, float]:
        """SIGKILL every process of the primary, then promote the standby. Returns the
        seconds each step took."""
        started = time.monotonic()
        self.crash_primary()
        killed = time.monotonic()
        reconfigure = self.promote()
        done = time.monotonic()
        return {"kill_s": killed - started, "promote_s": done - killed - reconfigure, "reconfigure_s": reconfigure,
                "failover_s": done - started}

    def close(self) -> None:
        if self._stalled is not None:
            try:
                os.kill(self._stalled, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for node in (self.standby, self.primary):
            if node.alive():  # a test is over: no need to wait for a shutdown
                node.crash()
        shutil.rmtree(self.root, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command may contain spaces and parentheses: the fields follow the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _exists(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"  # a zombie is dead, only not reaped
