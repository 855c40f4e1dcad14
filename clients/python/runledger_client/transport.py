"""HTTP/1.1 to the server: a keep-alive connection per thread, and the repeat rule.

Every write of the API is safe to repeat unchanged (dispatch by its key, intents and completions
by their identity, finish by its value, appends and turns by ``expected_seq``), so a ``503`` or a
lost answer (connection refused, reset or closed, a timeout) is repeated with the identical bytes
after a bounded, jittered exponential backoff. A request marked not repeatable (an append without
``expected_seq`` or ``step_no``) is repeated only when it provably never left: the connection
could not be opened.
"""

from __future__ import annotations

import http.client
import json
import random
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from .errors import AnswerLost, RunledgerError, Unavailable, error_from_answer


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to repeat a request that met ``503`` or lost its answer.

    The n-th repeat waits ``min(cap_s, base_s * 2**n)`` times a random factor in [0.5, 1]
    ("equal jitter"), so that bots that failed together do not come back together.
    """

    attempts: int = 8
    base_s: float = 0.05
    cap_s: float = 2.0

    def delay(self, repeat: int) -> float:
        ceiling = min(self.cap_s, self.base_s * (2**repeat))
        return ceiling * random.uniform(0.5, 1.0)


@dataclass
class Answer:
    """A response: status, headers (names lower-case), raw body."""

    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def request_id(self) -> Optional[str]:
        return self.headers.get("x-request-id")


@dataclass
class Stats:
    """What the transport went through (for logs and tests): requests sent, repeats after a 503,
    repeats after a lost answer."""

    requests: int = 0
    repeats_after_unavailable: int = 0
    repeats_after_lost_answer: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


class _NotSent(Exception):
    """The connection could not be opened: the request never left."""


class Transport:
    """Sends requests to one server with a bearer token.

    Thread-safe: each thread has its own keep-alive ``http.client`` connection, opened on first
    use and again after the server closed it.
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str],
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy = RetryPolicy(),
        ssl_context: Optional[ssl.SSLContext] = None,
        on_repeat: Optional[Callable[[str, int, Exception], None]] = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"the server's URL must be http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port or (443 if self._https else 80)
        self._prefix = parsed.path.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        self.retry = retry
        self._ssl_context = ssl_context
        self._on_repeat = on_repeat
        self._local = threading.local()
        self.stats = Stats()

    # -- connections -------------------------------------------------------------------------

    def open_connection(self, timeout_s: float) -> http.client.HTTPConnection:
        """A new connection of its own (the SSE tail holds one for as long as it reads)."""
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout_s, context=self._ssl_context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)

    def _thread_connection(self, timeout_s: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.open_connection(timeout_s)
            self._local.conn = conn
        if conn.sock is None:
            conn.timeout = timeout_s
            try:
                conn.connect()
            except OSError as e:
                self._drop_thread_connection()
                raise _NotSent(str(e)) from e
        else:
            conn.sock.settimeout(timeout_s)
        return conn

    def _drop_thread_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Closes this thread's connection (other threads' close when their threads end)."""
        self._drop_thread_connection()

    def headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        out = {"Accept": "application/json"}
        if self._token:
            out["Authorization"] = f"Bearer {self._token}"
        if extra:
            out.update(extra)
        return out

    def target(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        target = self._prefix + path
        if query:
            pairs = [(k, str(v)) for k, v in query.items() if v is not None]
            if pairs:
                target += "?" + urllib.parse.urlencode(pairs)
        return target

    # -- requests ----------------------------------------------------------------------------

    def send_once(
        self,
        method: str,
        target: str,
        body: Optional[bytes],
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Answer:
        """One try on this thread's connection: the answer, or ``_NotSent`` / an ``OSError`` /
        ``http.client.HTTPException`` (the answer lost)."""
        conn = self._thread_connection(timeout_s)
        try:
            conn.request(method, target, body=body, headers=dict(headers))
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            # Whatever was half-read on it, the connection is unusable now.
            self._drop_thread_connection()
            raise
        answer = Answer(
            response.status, {k.lower(): v for k, v in response.getheaders()}, data
        )
        if response.will_close:
            self._drop_thread_connection()
        return answer

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        raw_body: Optional[bytes] = None,
        content_type: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout_s: Optional[float] = None,
        repeatable: bool = True,
        retry: Optional[RetryPolicy] = None,
        ok: Sequence[int] = (200, 201),
    ) -> Answer:
        """Sends a request, repeating it unchanged after a 503 or a lost answer (see the module's
        docstring), and returns the answer if its status is in ``ok``; otherwise raises the typed
        error of its envelope (``errors.py``)."""
        policy = retry or self.retry
        body: Optional[bytes] = raw_body
        extra: Dict[str, str] = dict(headers or {})
        if json_body is not None:
            # Serialized once: every repeat sends the identical bytes.
            body = json.dumps(json_body, separators=(",", ":"), ensure_ascii=False).encode()
            content_type = content_type or "application/json"
        if content_type:
            extra["Content-Type"] = content_type
        all_headers = self.headers(extra)
        target = self.target(path, query)
        timeout = timeout_s if timeout_s is not None else self.timeout_s
        if not repeatable:
            # On a fresh connection a lost answer is never a stale keep-alive connection's.
            self._drop_thread_connection()
        for attempt in range(policy.attempts):
            last = attempt == policy.attempts - 1
            self.stats.count("requests")
            try:
                answer = self.send_once(method, target, body, all_headers, timeout)
            except _NotSent as e:
                if last:
                    raise AnswerLost(f"{method} {path}: cannot connect: {e}") from e
                self._repeat("repeats_after_lost_answer", method, path, attempt, e, policy)
                continue
            except (OSError, http.client.HTTPException) as e:
                if not repeatable or last:
                    raise AnswerLost(f"{method} {path}: the answer was lost: {e!r}") from e
                self._repeat("repeats_after_lost_answer", method, path, attempt, e, policy)
                continue
            if answer.status in ok:
                return answer
            error = self._error(answer)
            if isinstance(error, Unavailable) and not last:
                self._repeat("repeats_after_unavailable", method, path, attempt, error, policy)
                continue
            raise error
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _repeat(
        self, stat: str, method: str, path: str, attempt: int, cause: Exception, policy: RetryPolicy
    ) -> None:
        self.stats.count(stat)
        if self._on_repeat:
            self._on_repeat(f"{method} {path}", attempt + 1, cause)
        time.sleep(policy.delay(attempt))

    @staticmethod
    def _error(answer: Answer) -> RunledgerError:
        try:
            envelope = answer.json()
        except ValueError:
            envelope = None
        return error_from_answer(answer.status, envelope, answer.request_id)
