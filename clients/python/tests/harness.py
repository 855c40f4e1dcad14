"""What the client's tests stand on: a real `runledger serve` on a fresh database, tokens, and a
TCP relay that can lose answers.

The database is cloned from `runledger_template` (migrated by `test_cluster run`, which sets
RUNLEDGER_TEST_DATABASE_URL to its admin URL), as the C++ tests do (tests/support/
test_database.cc); the server binary is $RUNLEDGER_BINARY (ctest passes the build's).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import uuid
from pathlib import Path
from typing import Callable, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # runledger_client

REPO = HERE.parents[2]
EFFECT_CLASSES = "pure: read_*\nidempotent: write_*\n"


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "") -> None:
    """Polls `condition` every 10 ms until it holds; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(0.01)


def url_for_database(admin_url: str, database: str) -> str:
    parts = urllib.parse.urlsplit(admin_url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))


def admin_url() -> str:
    url = os.environ.get("RUNLEDGER_TEST_DATABASE_URL")
    if not url:
        raise RuntimeError(
            "RUNLEDGER_TEST_DATABASE_URL is not set: run under build/asan/tests/test_cluster run")
    return url


def binary() -> str:
    path = os.environ.get("RUNLEDGER_BINARY")
    if not path:
        raise RuntimeError("RUNLEDGER_BINARY (the runledger executable) is not set")
    return path


def psql(url: str, sql: str) -> str:
    done = subprocess.run(
        ["psql", url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"psql: {sql}: {done.stderr.strip()}")
    return done.stdout.strip()


class Server:
    """`runledger serve` on a database of its own, on a free loopback port.

    `stop()` sends SIGTERM and checks that it exits 0 (a sanitizer report would not), then drops
    the database. The request log (stderr) is kept in `log_path`.
    """

    def __init__(self, *, lease_ms: int = 30_000, extra_args: tuple = ()) -> None:
        self.admin_url = admin_url()
        self.database = "py_" + uuid.uuid4().hex[:16]
        psql(self.admin_url, f'CREATE DATABASE "{self.database}" TEMPLATE runledger_template '
                             "STRATEGY FILE_COPY")
        self.database_url = url_for_database(self.admin_url, self.database)
        self.root = Path(tempfile.mkdtemp(prefix="runledger-py-"))
        classes = self.root / "effect_classes"
        classes.write_text(EFFECT_CLASSES)
        self.log_path = self.root / "serve.log"
        self.env = dict(os.environ, DATABASE_URL=self.database_url)
        self.env.setdefault("LSAN_OPTIONS", f"suppressions={REPO}/tests/lsan.supp")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [binary(), "serve", "--listen", "127.0.0.1:0", "--root", str(self.root),
             "--lease-ms", str(lease_ms), "--effect-classes", str(classes), "--grace-ms", "3000",
             *extra_args],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        api_url = self.root / "api_url"
        wait_until(lambda: self.process.poll() is not None or
                   (api_url.exists() and api_url.read_text().strip() != ""),
                   60, "serve to write api_url")
        if self.process.poll() is not None:
            raise RuntimeError(f"serve exited {self.process.returncode}:\n{self.log()}")
        self.url = api_url.read_text().strip()
        self.port = int(self.url.rsplit(":", 1)[1])

    def token(self, name: str = "py", scope: str = "bot", slots: Optional[str] = None) -> str:
        command = [binary(), "token", "create", "--scope", scope, "--name", name]
        if slots is not None:
            command += ["--slots", slots]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, check=True)
        return done.stdout.strip().splitlines()[-1]

    def sql(self, statement: str) -> str:
        return psql(self.database_url, statement)

    def cancel_live_runs(self) -> None:
        """Cancels every queued or running run (between tests sharing this server, so that no
        test claims another's leftovers)."""
        live = self.sql("SELECT run_id FROM live_runs WHERE status IN ('queued', 'running')")
        for run_id in live.split():
            subprocess.run([binary(), "runs", "cancel", run_id, "--by", "tests"], env=self.env,
                           capture_output=True, check=True)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_lines(self, route: str) -> List[str]:
        return [line for line in self.log().splitlines() if f" {route} " in line]

    def cut_database(self) -> None:
        """Shuts the database to new sessions and ends the server's: the server answers 503
        until `restore_database()`."""
        psql(self.admin_url, f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS false')
        psql(self.admin_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             f"WHERE datname = '{self.database}'")
        wait_until(lambda: psql(self.admin_url, "SELECT count(*) FROM pg_stat_activity "
                                f"WHERE datname = '{self.database}'") == "0",
                   10, "the database's sessions to end")

    def restore_database(self) -> None:
        psql(self.admin_url, f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS true')

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        code = self.process.returncode
        try:
            psql(self.admin_url, f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        except RuntimeError:
            pass  # the cluster is thrown away after the run anyway
        if code != 0:
            raise AssertionError(f"serve exited {code}:\n{self.log()[-20000:]}")
        for path in sorted(self.root.rglob("*"), reverse=True):
            path.unlink() if not path.is_dir() else path.rmdir()
        self.root.rmdir()


class Relay:
    """A TCP relay in front of the server that can lose answers the way a network does.

    `drop_next_answers(n)`: the next n answers the server writes are thrown away and their
    connection closed (the request did reach the server, and was served). `close_all()`: closes
    every open connection, as a server or a middlebox ending idle keep-alive connections does.
    `cut()`/`mend()`: every connection is closed at once / relayed again. `connections` counts
    the connections accepted.
    """

    def __init__(self, port: int) -> None:
        self._upstream = ("127.0.0.1", port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._drops = 0
        self._cut = False
        self._open: List[socket.socket] = []
        self.connections = 0
        self.dropped = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next_answers(self, n: int = 1) -> None:
        with self._lock:
            self._drops += n

    def close_all(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            _close(s)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
        self.close_all()

    def mend(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.close_all()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                cut = self._cut
            if cut:
                _close(client)
                continue
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is server:
                        with self._lock:
                            drop = self._drops > 0
                            if drop:
                                self._drops -= 1
                                self.dropped += 1
                        if drop:
                            return  # the answer is lost; both ends are closed below
                        client.sendall(data)
                    else:
                        server.sendall(data)
        except (OSError, ValueError):
            return  # closed by close_all()
        finally:
            with self._lock:
                self._open = [s for s in self._open if s is not client and s is not server]
            _close(client)
            _close(server)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open) // 2


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


class ServerTest(unittest.TestCase):
    """A test class with one server for all its tests (`lease_ms` per class)."""

    lease_ms = 30_000
    server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server(lease_ms=cls.lease_ms)
        cls.token = cls.server.token()

    def tearDown(self) -> None:
        self.server.cancel_live_runs()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def client(self, url: Optional[str] = None, **kwargs):
        from runledger_client import Client

        client = Client(url or self.server.url, self.token, **kwargs)
        self.addCleanup(client.close)
        return client

    def dispatch(self, client, **kwargs) -> str:
        key = uuid.uuid4().hex
        fields = dict(thread_key=f"thread-{key}", requester="py-tests")
        fields.update(kwargs)
        return client.dispatch(f"key-{key}", **fields)["run_id"]
