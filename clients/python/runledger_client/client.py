"""The routes of the HTTP API, one method each (README: "The HTTP API").

:class:`Client` is stateless apart from its connections: it knows nothing of leases or seqs.
Bots normally use it through :class:`~runledger_client.Incarnation` and
:class:`~runledger_client.Run`, which track the generation, the transcript's next seq, the
heartbeats and the self-fence.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from .errors import AnswerLost, RunledgerError, Unavailable
from .transport import Answer, RetryPolicy, Transport

#: A run in one of these is over: nothing more is written to it.
TERMINAL_STATUSES = frozenset({"finished", "failed", "interrupted", "cancelled"})

#: The longest ``wait_ms`` the server accepts (claims and run waits alike).
MAX_WAIT_MS = 30_000

#: Entries larger than this are appended raw (``application/octet-stream``), not as base64 JSON.
RAW_APPEND_BYTES = 1 << 20

Body = Union[bytes, str, Mapping[str, Any], Sequence[Any]]


def to_bytes(body: Body) -> bytes:
    """An entry's bytes: bytes as they are, str as UTF-8, anything else as compact JSON."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class Entry:
    """A transcript entry."""

    seq: int
    kind: str
    generation: int
    sha256: str
    body: bytes
    created_at: str

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> "Entry":
        return cls(
            seq=j["seq"],
            kind=j["kind"],
            generation=j["generation"],
            sha256=j["sha256"],
            body=base64.b64decode(j["body_base64"]),
            created_at=j["created_at"],
        )

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Intent:
    """A tool call the model asked for, to be written ahead of running it."""

    tool: str
    call_id: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    """A recorded intent: its step number and effect key (``run_id/step_no``), which an unsafe
    tool passes on to whatever it changes so that the change can be recognized later."""

    step_no: int
    tool: str
    call_id: str
    args: Mapping[str, Any]
    effect_key: str
    effect_class: Optional[str] = None


@dataclass(frozen=True)
class Settlement:
    """What ``settle`` did after a takeover: ``settled`` (the server wrote their results, e.g. a
    synthetic one for an unsafe call in flight), ``rerun`` (pure or idempotent calls in flight,
    the bot's to run and complete), and whether settle ``interrupted`` the run."""

    settled: List[Dict[str, Any]]
    rerun: List[Step]
    interrupted: bool


class Tail:
    """An SSE tail of a transcript, iterated for its entries in seq order.

    A connection that drops (or stays silent past ``idle_timeout_s``; the server sends a
    keep-alive every 15 s) is opened again with ``Last-Event-ID``: nothing is missed or repeated.
    Iteration ends after the server's ``end`` event, once the run is over: ``end`` then holds its
    ``{"run_id", "status"}``. Leaving the loop early closes the connection.
    """

    def __init__(
        self,
        transport: Transport,
        run_id: str,
        from_seq: int,
        idle_timeout_s: float,
        retry: RetryPolicy,
    ) -> None:
        self._transport = transport
        self._run_id = run_id
        self._from = from_seq
        self._idle_timeout_s = idle_timeout_s
        self._retry = retry
        self.last_seq: Optional[int] = None
        self.end: Optional[Dict[str, Any]] = None
        self.connections = 0

    def __iter__(self) -> Iterator[Entry]:
        failures = 0
        while self.end is None:
            progressed = False
            try:
                for entry in self._one_connection():
                    progressed = True
                    yield entry
                if self.end is not None:
                    return
                cause: Exception = AnswerLost("the stream ended without its end event")
            except (OSError, http.client.HTTPException, ValueError, Unavailable) as e:
                cause = e
            failures = 0 if progressed else failures + 1
            if failures >= self._retry.attempts:
                raise AnswerLost(f"tail of run {self._run_id}: {cause}") from cause
            self._transport.stats.count("repeats_after_lost_answer")
            time.sleep(self._retry.delay(max(failures - 1, 0)))

    def _one_connection(self) -> Iterator[Entry]:
        extra = {"Accept": "text/event-stream"}
        if self.last_seq is not None:
            extra["Last-Event-ID"] = str(self.last_seq)
        target = self._transport.target(
            f"/v1/runs/{self._run_id}/transcript", {"from": self._from}
        )
        conn = self._transport.open_connection(self._idle_timeout_s)
        self.connections += 1
        try:
            conn.request("GET", target, headers=self._transport.headers(extra))
            response = conn.getresponse()
            if response.status != 200:
                answer = Answer(
                    response.status,
                    {k.lower(): v for k, v in response.getheaders()},
                    response.read(),
                )
                raise Transport._error(answer)  # Unavailable is retried by __iter__
            media_type = (response.getheader("Content-Type") or "").split(";")[0].strip()
            if media_type != "text/event-stream":
                raise RunledgerError(
                    f"tail of run {self._run_id}: the server answered {media_type or 'no type'},"
                    " not text/event-stream (a server without the SSE tail?)",
                    code="not_a_stream", status=response.status)
            event, data = "message", []
            while True:
                line = response.readline()
                if not line:
                    return  # closed by the server or in between: reconnect
                text = line.decode().rstrip("\r\n")
                if text == "":
                    if data:
                        entry = self._dispatch(event, "\n".join(data))
                        if entry is not None:
                            yield entry
                        if self.end is not None:
                            return
                    event, data = "message", []
                elif text.startswith(":"):
                    continue  # a keep-alive comment
                else:
                    name, _, value = text.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "event":
                        event = value
                    elif name == "data":
                        data.append(value)
        finally:
            conn.close()

    def _dispatch(self, event: str, data: str) -> Optional[Entry]:
        if event == "end":
            self.end = json.loads(data)
            return None
        entry = Entry.from_json(json.loads(data))
        if self.last_seq is not None and entry.seq <= self.last_seq:
            return None  # already yielded (a server that repeats after a reconnect)
        self.last_seq = entry.seq
        return entry


class Client:
    """One server, one token. Thread-safe (a keep-alive connection per thread).

    ``base_url``: e.g. ``http://127.0.0.1:8080`` (``runledger serve`` writes it to
    ``<root>/api_url``). ``timeout_s``: how long an answer may take, beyond a long-poll's wait.
    ``retry``: how 503s and lost answers are repeated (:class:`RetryPolicy`).
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str],
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy = RetryPolicy(),
        ssl_context: Any = None,
        on_repeat: Any = None,
    ) -> None:
        self.transport = Transport(
            base_url,
            token,
            timeout_s=timeout_s,
            retry=retry,
            ssl_context=ssl_context,
            on_repeat=on_repeat,
        )

    def close(self) -> None:
        self.transport.close()

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.transport.request(method, path, **kwargs).json()

    # -- runs --------------------------------------------------------------------------------

    def dispatch(
        self,
        dispatch_key: str,
        thread_key: str,
        requester: str,
        *,
        profile: Any = None,
        budget: Optional[Mapping[str, int]] = None,
        system_prompt: Union[str, bytes, None] = None,
        input: Any = None,
        parent_run_id: Optional[str] = None,
        parent_instance_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Creates the run of ``dispatch_key`` once; the same key again answers the same run.
        The answer is the run, with ``created`` (false for a repeat). ``budget``:
        ``{"wall_s", "max_steps"}``. A str system prompt travels as text, bytes as base64."""
        body: Dict[str, Any] = {
            "dispatch_key": dispatch_key,
            "thread_key": thread_key,
            "requester": requester,
        }
        optional = {
            "profile": profile,
            "budget": dict(budget) if budget is not None else None,
            "input": input,
            "parent_run_id": parent_run_id,
            "parent_instance_id": parent_instance_id,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if isinstance(system_prompt, bytes):
            body["system_prompt_base64"] = b64(system_prompt)
        elif system_prompt is not None:
            body["system_prompt"] = system_prompt
        return self._json("POST", "/v1/runs", json_body=body)

    def get_run(self, run_id: str, *, wait_ms: Optional[int] = None) -> Dict[str, Any]:
        """The run. With ``wait_ms`` (0–30000) the server answers as soon as the run is over, or
        at the deadline with its current state."""
        timeout = None
        if wait_ms is not None:
            timeout = wait_ms / 1000 + self.transport.timeout_s
        return self._json(
            "GET", f"/v1/runs/{run_id}", query={"wait_ms": wait_ms}, timeout_s=timeout
        )

    def wait(self, run_id: str, timeout_s: float) -> Dict[str, Any]:
        """The run once it is over (status in :data:`TERMINAL_STATUSES`), or its state after
        ``timeout_s``; long waits are several ``wait_ms`` requests, no polling loop."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            run = self.get_run(run_id, wait_ms=min(remaining_ms, MAX_WAIT_MS))
            if run["status"] in TERMINAL_STATUSES or remaining_ms == 0:
                return run

    def list_runs(
        self,
        *,
        status: Optional[str] = None,
        thread_key: Optional[str] = None,
        requester: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Dict[str, Any]:
        """One page, newest first: ``{"runs", "next"}`` (``next``: the cursor of the next page,
        or None). Exactly one of ``status``, ``thread_key`` and ``requester``."""
        query = {
            "status": status,
            "thread_key": thread_key,
            "requester": requester,
            "limit": limit,
            "cursor": cursor,
        }
        return self._json("GET", "/v1/runs", query=query)

    def iter_runs(self, **filters: Any) -> Iterator[Dict[str, Any]]:
        """Every run matching the filter of :meth:`list_runs`, page after page."""
        cursor = None
        while True:
            page = self.list_runs(cursor=cursor, **filters)
            yield from page["runs"]
            cursor = page.get("next")
            if not cursor:
                return

    def finish(
        self, run_id: str, generation: int, *, status: str = "finished", result: Any = None
    ) -> Dict[str, Any]:
        """Ends the run (``finished`` or ``failed``) with its result; the identical finish again
        is answered the same, another one is :class:`Conflict`."""
        body = {"generation": generation, "status": status, "result": result}
        return self._json("POST", f"/v1/runs/{run_id}/finish", json_body=body)

    def release(self, run_id: str, generation: int) -> Dict[str, Any]:
        """Hands the run back, queued for an immediate claim by anyone."""
        return self._json(
            "POST", f"/v1/runs/{run_id}/release", json_body={"generation": generation}
        )

    # -- claims and leases -------------------------------------------------------------------

    def claim(
        self, slot: str, incarnation: str, *, max: int = 1, wait_ms: int = 0
    ) -> List[Dict[str, Any]]:
        """Up to ``max`` runs for this incarnation of ``slot``: ``[{run_id, generation,
        reclaimed, lease_expires_at}]``. A new incarnation first takes every run of the slot's
        older ones (``reclaimed: true``); with ``wait_ms`` the server holds the request until a
        run is dispatched or the wait is over. Repeated after a lost answer: the runs that answer
        claimed come back to a claim once their lease has run out."""
        body = {"slot": slot, "incarnation": incarnation, "max": max, "wait_ms": wait_ms}
        return self._json(
            "POST",
            "/v1/runs/claim",
            json_body=body,
            timeout_s=wait_ms / 1000 + self.transport.timeout_s,
        )["runs"]

    def heartbeat(
        self,
        incarnation: str,
        runs: Sequence[tuple],
        *,
        retry: Optional[RetryPolicy] = None,
    ) -> Dict[str, Any]:
        """Extends the leases of ``runs`` (``(run_id, generation)`` pairs, at most 1000): answers
        ``{"lost": [run_id], "lease_expires_at"}``, ``lost`` naming the runs no longer held."""
        body = {
            "incarnation": incarnation,
            "runs": [{"run_id": r, "generation": g} for r, g in runs],
        }
        return self._json("POST", "/v1/leases/heartbeat", json_body=body, retry=retry)

    # -- the write-ahead record --------------------------------------------------------------

    def turn(
        self,
        run_id: str,
        generation: int,
        body: Body,
        *,
        intents: Sequence[Mapping[str, Any]] = (),
        expected_seq: Optional[int] = None,
    ) -> Dict[str, Any]:
        """The model's turn (an assistant entry) and the intents of its tool calls, in one write:
        ``{"seq", "effect_keys"}``. ``intents``: ``{step_no, tool, call_id, args}`` each."""
        request: Dict[str, Any] = {"generation": generation, "body_base64": b64(to_bytes(body))}
        if expected_seq is not None:
            request["expected_seq"] = expected_seq
        if intents:
            request["intents"] = [dict(i) for i in intents]
        return self._json(
            "POST",
            f"/v1/runs/{run_id}/turns",
            json_body=request,
            repeatable=expected_seq is not None,
        )

    def intent(
        self,
        run_id: str,
        generation: int,
        step_no: int,
        tool: str,
        call_id: str,
        args: Mapping[str, Any],
    ) -> Dict[str, Any]:
        """Writes one call ahead of running it: ``{"effect_key", "effect_class"}``."""
        body = {
            "generation": generation,
            "step_no": step_no,
            "tool": tool,
            "call_id": call_id,
            "args": dict(args),
        }
        return self._json("POST", f"/v1/runs/{run_id}/steps", json_body=body)

    def complete(
        self,
        run_id: str,
        generation: int,
        step_no: int,
        *,
        result: Any = None,
        result_bytes: Optional[bytes] = None,
        error: Optional[str] = None,
        tool_result: Optional[Body] = None,
    ) -> Dict[str, Any]:
        """Records a step's outcome — exactly one of ``result`` (JSON), ``result_bytes`` and
        ``error`` — and, with ``tool_result``, its tool_result entry in the same write. Answers
        the step (with ``result_seq``, the entry's seq)."""
        given = (result is not None) + (result_bytes is not None) + (error is not None)
        if given != 1:
            raise ValueError("complete: exactly one of result, result_bytes and error")
        body: Dict[str, Any] = {"generation": generation}
        if result is not None:
            body["result"] = result
        elif result_bytes is not None:
            body["result_base64"] = b64(result_bytes)
        else:
            body["error"] = error
        if tool_result is not None:
            body["tool_result_base64"] = b64(to_bytes(tool_result))
        return self._json(
            "POST", f"/v1/runs/{run_id}/steps/{step_no}/complete", json_body=body
        )

    def steps(self, run_id: str) -> List[Dict[str, Any]]:
        """The run's steps in order (state, effect key, settlement, result_seq, ...)."""
        return self._json("GET", f"/v1/runs/{run_id}/steps")["steps"]

    def settle(self, run_id: str, generation: int) -> Settlement:
        """After a takeover (``reclaimed``) or a release: the server settles what it can alone
        and hands back the pure and idempotent calls in flight to be re-run."""
        j = self._json("POST", f"/v1/runs/{run_id}/settle", json_body={"generation": generation})
        rerun = [
            Step(r["step_no"], r["tool"], r["call_id"], r["args"], r["effect_key"])
            for r in j["rerun"]
        ]
        return Settlement(j["settled"], rerun, j["interrupted"])

    # -- the transcript ----------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        generation: int,
        kind: str,
        body: Body,
        *,
        expected_seq: Optional[int] = None,
        step_no: Optional[int] = None,
        raw: Optional[bool] = None,
    ) -> Dict[str, Any]:
        """Appends an entry: ``{"seq", "sha256"}``. With ``expected_seq`` (or, for a tool_result,
        ``step_no``) a repeat answers the first answer, so a lost answer is repeated; without
        either it is not (it would append again). ``raw``: send the bytes as
        ``application/octet-stream`` (default: for entries over :data:`RAW_APPEND_BYTES`)."""
        data = to_bytes(body)
        repeatable = expected_seq is not None or step_no is not None
        path = f"/v1/runs/{run_id}/transcript"
        if raw if raw is not None else len(data) > RAW_APPEND_BYTES:
            query = {
                "generation": generation,
                "kind": kind,
                "expected_seq": expected_seq,
                "step_no": step_no,
            }
            return self._json(
                "POST",
                path,
                query=query,
                raw_body=data,
                content_type="application/octet-stream",
                repeatable=repeatable,
            )
        request: Dict[str, Any] = {"generation": generation, "kind": kind, "body_base64": b64(data)}
        if expected_seq is not None:
            request["expected_seq"] = expected_seq
        if step_no is not None:
            request["step_no"] = step_no
        return self._json("POST", path, json_body=request, repeatable=repeatable)

    def read(self, run_id: str, *, from_seq: int = 1, limit: int = 100) -> Dict[str, Any]:
        """One page of entries from ``from_seq``: ``{"entries": [Entry], "next"}`` (``next``:
        the seq the next page starts at, or None)."""
        j = self._json(
            "GET", f"/v1/runs/{run_id}/transcript", query={"from": from_seq, "limit": limit}
        )
        return {"entries": [Entry.from_json(e) for e in j["entries"]], "next": j["next"]}

    def entries(self, run_id: str, *, from_seq: int = 1) -> Iterator[Entry]:
        """Every entry from ``from_seq`` on, page after page (what exists now; :meth:`tail`
        follows new ones)."""
        next_seq: Optional[int] = from_seq
        while next_seq is not None:
            page = self.read(run_id, from_seq=next_seq, limit=1000)
            yield from page["entries"]
            next_seq = page["next"]

    def entry(self, run_id: str, seq: int) -> Entry:
        """One entry, its body fetched raw (no base64)."""
        answer = self.transport.request("GET", f"/v1/runs/{run_id}/transcript/{seq}")
        h = answer.headers
        return Entry(
            seq, h["x-entry-kind"], int(h["x-entry-generation"]), h["x-entry-sha256"], answer.body, ""
        )

    def tail(
        self, run_id: str, *, from_seq: int = 1, idle_timeout_s: float = 45.0
    ) -> Tail:
        """Follows the transcript live (Server-Sent Events) from ``from_seq``: see :class:`Tail`."""
        return Tail(self.transport, run_id, from_seq, idle_timeout_s, self.transport.retry)

    def verify(self, run_id: str) -> Dict[str, Any]:
        """Checks the transcript's hash chain: ``{"ok", "entries"}``, or with ``first_bad_seq``
        and ``problem``."""
        return self._json("GET", f"/v1/runs/{run_id}/verify")

    # -- health ------------------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether ``/readyz`` answers 200 (the database is reachable), asked once."""
        try:
            self.transport.request("GET", "/readyz", retry=RetryPolicy(attempts=1))
            return True
        except RunledgerError:
            return False
