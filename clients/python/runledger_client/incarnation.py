"""A bot's side of the protocol: an incarnation of a slot, its heartbeats, and the runs it holds.

An :class:`Incarnation` is one start of a bot process serving a slot: a fresh UUID, so that after
a ``kill -9`` the restarted process claims as a new incarnation and the server hands it the old
one's runs at once (``reclaimed``). It keeps one heartbeat thread that extends every held run's
lease in one batched call, and notes the runs reported ``lost``.

A :class:`Run` is one claimed run: its generation, the transcript's next seq (``expected_seq``
of every append and turn, so that a repeat after a lost answer never writes twice) and the next
step number. Before a tool starts it self-fences (:meth:`Run.start_tool`).
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from .client import Body, Client, Entry, Intent, Settlement, Step, to_bytes
from .errors import BudgetExhausted, Fenced, LeaseLost, RunledgerError, Superseded
from .transport import RetryPolicy

log = logging.getLogger("runledger_client")

#: The most runs one heartbeat call may carry (the server's limit).
MAX_HEARTBEAT_RUNS = 1000


def parse_time(text: str) -> datetime.datetime:
    """An RFC 3339 time of the API (``2026-12-01T08:43:24.731Z``)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


class _Lease:
    """What the incarnation knows of one held run's lease."""

    __slots__ = ("generation", "confirmed_at", "lost")

    def __init__(self, generation: int, confirmed_at: float) -> None:
        self.generation = generation
        # time.monotonic() when the last request that (re)granted the lease was *sent*: the
        # server granted it later, so the lease lasts at least until confirmed_at + lease_s.
        self.confirmed_at = confirmed_at
        self.lost = False


class Incarnation:
    """One start of a bot process serving ``slot`` (use as a context manager, or call
    :meth:`start` and :meth:`close`).

    ``lease_s``: the server's lease (``serve --lease-ms``); by default learned from the first
    claimed run (its ``lease_expires_at - claimed_at``, both on the server's clock), and until
    then every tool start re-checks the lease synchronously. ``heartbeat_every_s`` (default: a
    third of the lease) and ``safety_margin_s`` (default: a quarter of it): a tool does not start
    on a lease last confirmed longer ago than the lease minus the margin without a fresh
    heartbeat first.
    """

    def __init__(
        self,
        client: Client,
        slot: str,
        *,
        incarnation_id: Optional[str] = None,
        lease_s: Optional[float] = None,
        heartbeat_every_s: Optional[float] = None,
        safety_margin_s: Optional[float] = None,
        recheck_retry: RetryPolicy = RetryPolicy(attempts=3, base_s=0.05, cap_s=0.2),
    ) -> None:
        self.client = client
        self.slot = slot
        self.id = incarnation_id or str(uuid.uuid4())
        self._configured_lease_s = lease_s
        self.lease_s = lease_s
        self._heartbeat_every_s = heartbeat_every_s
        self._safety_margin_s = safety_margin_s
        self._recheck_retry = recheck_retry
        self._held: Dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.superseded = False
        #: Heartbeat calls answered (one per batch of up to 1000 runs).
        self.heartbeat_calls = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> "Incarnation":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Starts the heartbeat thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._heartbeat_loop, name=f"heartbeat-{self.slot}", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        """Stops the heartbeat thread (the runs still held are left to their leases, or to this
        slot's next incarnation)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def heartbeat_every_s(self) -> float:
        if self._heartbeat_every_s is not None:
            return self._heartbeat_every_s
        return self.lease_s / 3 if self.lease_s else 1.0

    @property
    def safety_margin_s(self) -> float:
        if self._safety_margin_s is not None:
            return self._safety_margin_s
        return self.lease_s / 4 if self.lease_s else 0.0

    # -- claims ------------------------------------------------------------------------------

    def claim(self, *, max: int = 1, wait_ms: int = 0) -> List["Run"]:
        """Claims up to ``max`` runs (waiting up to ``wait_ms`` for one); each is held (its
        lease heartbeated) until finished, released or closed. A run taken over from this slot's
        older incarnation has ``reclaimed`` set: :meth:`Run.resume` settles it."""
        if self.superseded:
            raise Superseded(f"incarnation {self.id} of slot {self.slot} was superseded")
        sent = time.monotonic()
        try:
            claims = self.client.claim(self.slot, self.id, max=max, wait_ms=wait_ms)
        except Superseded:
            self._lose_everything()
            raise
        runs = []
        for claim in claims:
            run = Run(self, claim)
            try:
                # Before the run is heartbeated, so that its lease is still the claim's.
                run.refresh()
                self._learn_lease(run.info, claim["generation"])
            except RunledgerError as e:
                log.warning("run %s: reading it after the claim: %s", run.run_id, e)
            with self._lock:
                self._held[run.run_id] = _Lease(claim["generation"], sent)
            runs.append(run)
        return runs

    def runs(self, *, wait_ms: int = 20_000, max: int = 1) -> Iterator["Run"]:
        """Claimed runs, one after another, until :meth:`close` (or :class:`Superseded`)."""
        while not self._stop.is_set():
            yield from self.claim(max=max, wait_ms=wait_ms)

    def _learn_lease(self, info: Optional[Mapping[str, Any]], generation: int) -> None:
        if not info or info.get("generation") != generation:
            return
        if not info.get("claimed_at") or not info.get("lease_expires_at"):
            return
        granted = parse_time(info["lease_expires_at"]) - parse_time(info["claimed_at"])
        seconds = granted.total_seconds()
        if seconds > 0 and (self.lease_s is None or seconds < self.lease_s):
            self.lease_s = seconds

    # -- leases ------------------------------------------------------------------------------

    def holds(self, run_id: str) -> bool:
        """Whether the run is held and not known lost."""
        with self._lock:
            lease = self._held.get(run_id)
            return lease is not None and not lease.lost and not self.superseded

    def lease_age_s(self, run_id: str) -> Optional[float]:
        """Seconds since the run's lease was last confirmed (None: not held)."""
        with self._lock:
            lease = self._held.get(run_id)
            return None if lease is None else time.monotonic() - lease.confirmed_at

    def heartbeat_now(self, retry: Optional[RetryPolicy] = None) -> List[str]:
        """One heartbeat of every held run, batched (up to 1000 runs a call); returns the runs
        newly found lost. Raises :class:`Superseded` (every run then lost) or the call's error."""
        with self._lock:
            batch = [(r, lease.generation) for r, lease in self._held.items() if not lease.lost]
        newly_lost: List[str] = []
        for start in range(0, len(batch), MAX_HEARTBEAT_RUNS):
            chunk = batch[start : start + MAX_HEARTBEAT_RUNS]
            sent = time.monotonic()
            try:
                answer = self.client.heartbeat(self.id, chunk, retry=retry)
            except Superseded:
                self._lose_everything()
                raise
            lost = set(answer["lost"])
            with self._lock:
                self.heartbeat_calls += 1
                for run_id, generation in chunk:
                    lease = self._held.get(run_id)
                    if lease is None or lease.generation != generation or lease.lost:
                        continue
                    if run_id in lost:
                        lease.lost = True
                        newly_lost.append(run_id)
                    else:
                        lease.confirmed_at = max(lease.confirmed_at, sent)
        for run_id in newly_lost:
            log.warning("run %s: lost (the heartbeat says another holds it now)", run_id)
        return newly_lost

    def check_lease(self, run_id: str) -> None:
        """The self-fence: returns if the run's lease is known to hold for at least the safety
        margin more, else raises :class:`LeaseLost`. A lease confirmed longer ago than the lease
        minus the margin is re-checked with a synchronous heartbeat first."""
        if self._fresh(run_id):
            return
        if not self.holds(run_id):
            raise LeaseLost(f"run {run_id}: lost (another holds it now)")
        try:
            self.heartbeat_now(retry=self._recheck_retry)
        except RunledgerError as e:
            raise LeaseLost(f"run {run_id}: the lease could not be re-checked: {e}") from e
        if not self._fresh(run_id):
            raise LeaseLost(f"run {run_id}: the lease is lost or too old to start a tool on")

    def _fresh(self, run_id: str) -> bool:
        with self._lock:
            lease = self._held.get(run_id)
            if lease is None or lease.lost or self.superseded:
                return False
            if self.lease_s is None:
                return False  # the lease's length is unknown: only a fresh heartbeat tells
            return time.monotonic() - lease.confirmed_at <= self.lease_s - self.safety_margin_s

    def mark_lost(self, run_id: str) -> None:
        with self._lock:
            lease = self._held.get(run_id)
            if lease is not None:
                lease.lost = True

    def forget(self, run_id: str) -> None:
        """Stops heartbeating the run (finished, released, or given up)."""
        with self._lock:
            self._held.pop(run_id, None)

    def _lose_everything(self) -> None:
        with self._lock:
            self.superseded = True
            for lease in self._held.values():
                lease.lost = True
        log.warning("incarnation %s of slot %s: superseded by a newer one", self.id, self.slot)

    def _heartbeat_loop(self) -> None:
        try:
            while not self._stop.wait(self.heartbeat_every_s):
                try:
                    self.heartbeat_now()
                except Superseded:
                    return
                except RunledgerError as e:
                    # The runs' leases are not confirmed: the self-fence sees their age.
                    log.warning("heartbeat: %s", e)
        finally:
            self.client.transport.close()  # this thread's connection


def tool_result_body(step: Step, text: str, *, is_error: bool = False) -> bytes:
    """A tool_result entry in the shape the server writes its synthetic ones in."""
    return to_bytes(
        {
            "type": "tool_result",
            "call_id": step.call_id,
            "tool": step.tool,
            "effect_key": step.effect_key,
            "synthetic": False,
            "is_error": is_error,
            "text": text,
        }
    )


class Run:
    """A run held by an :class:`Incarnation`: every write carries its generation, and appends
    and turns carry the transcript's next seq, tracked here from the head.

    A :class:`Fenced` answer (the run moved on) marks the run lost and is raised: stop driving
    it. Use as a context manager so that a run left without finish or release stops being
    heartbeated.
    """

    def __init__(self, incarnation: Incarnation, claim: Mapping[str, Any]) -> None:
        self.incarnation = incarnation
        self.client = incarnation.client
        self.run_id: str = claim["run_id"]
        self.generation: int = claim["generation"]
        self.reclaimed: bool = bool(claim.get("reclaimed"))
        #: The run object (``GET /v1/runs/{id}``) as last read.
        self.info: Optional[Dict[str, Any]] = None
        #: The seq the next append or turn must land at.
        self.next_seq: Optional[int] = None
        #: The step number of the next intent.
        self.next_step_no: Optional[int] = None

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Run({self.run_id}, generation {self.generation})"

    @property
    def lost(self) -> bool:
        """Whether this process knows it no longer holds the run."""
        return not self.incarnation.holds(self.run_id)

    @property
    def profile(self) -> Any:
        return self._info()["profile"]

    @property
    def input(self) -> Any:
        return self._info()["input"]

    def _info(self) -> Dict[str, Any]:
        if self.info is None:
            self.refresh()
        assert self.info is not None
        return self.info

    def _guard(self, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except Fenced:
            self.incarnation.mark_lost(self.run_id)
            raise
        except BudgetExhausted:
            self.incarnation.forget(self.run_id)  # the server finished it failed
            raise

    def refresh(self) -> Dict[str, Any]:
        """Reads the run again: its state, the transcript's head (the next seq) and its steps."""
        info = self.client.get_run(self.run_id)
        self.info = info
        self.next_seq = info["transcript"]["seq"] + 1
        self.next_step_no = info["steps"] + 1
        return info

    def _positions(self) -> None:
        if self.next_seq is None or self.next_step_no is None:
            self.refresh()

    # -- the loop's steps --------------------------------------------------------------------

    def resume(self) -> Optional[Settlement]:
        """Settles the run if it was taken over from an older incarnation (``reclaimed``); None
        otherwise. Run and complete the settlement's ``rerun`` steps before going on."""
        return self.settle() if self.reclaimed else None

    def settle(self) -> Settlement:
        """Settles the calls an earlier holder left in flight (see :meth:`Client.settle`)."""
        settlement = self._guard(lambda: self.client.settle(self.run_id, self.generation))
        self.refresh()  # settlement may have appended entries
        if settlement.interrupted:
            self.incarnation.forget(self.run_id)
        return settlement

    def turn(self, body: Body, intents: Sequence[Intent] = ()) -> List[Step]:
        """Writes the model's turn (an assistant entry) with the intents of its tool calls, in
        one write; returns the recorded steps in order, numbered from the run's next step."""
        self._positions()
        first = self.next_step_no
        assert first is not None
        payload = [
            {"step_no": first + i, "tool": it.tool, "call_id": it.call_id, "args": dict(it.args)}
            for i, it in enumerate(intents)
        ]
        answer = self._guard(
            lambda: self.client.turn(
                self.run_id, self.generation, body, intents=payload, expected_seq=self.next_seq
            )
        )
        self.next_seq = answer["seq"] + 1
        self.next_step_no = first + len(payload)
        return [
            Step(p["step_no"], p["tool"], p["call_id"], p["args"], key)
            for p, key in zip(payload, answer["effect_keys"])
        ]

    def intent(self, intent: Intent) -> Step:
        """Writes one call ahead of running it (outside a turn); returns the step."""
        self._positions()
        step_no = self.next_step_no
        assert step_no is not None
        answer = self._guard(
            lambda: self.client.intent(
                self.run_id, self.generation, step_no, intent.tool, intent.call_id, intent.args
            )
        )
        self.next_step_no = step_no + 1
        return Step(
            step_no, intent.tool, intent.call_id, intent.args, answer["effect_key"],
            answer["effect_class"],
        )

    def start_tool(self, step: Optional[Step] = None) -> None:
        """The self-fence, called right before a tool's effect: raises :class:`LeaseLost` when
        the lease cannot be shown to hold (see :meth:`Incarnation.check_lease`)."""
        self.incarnation.check_lease(self.run_id)

    def complete(
        self,
        step: Step,
        *,
        result: Any = None,
        result_bytes: Optional[bytes] = None,
        error: Optional[str] = None,
        tool_result: Optional[Body] = None,
    ) -> Dict[str, Any]:
        """Records the step's outcome and (``tool_result``) its transcript entry in one write;
        returns the step. Repeating it is harmless."""
        answer = self._guard(
            lambda: self.client.complete(
                self.run_id,
                self.generation,
                step.step_no,
                result=result,
                result_bytes=result_bytes,
                error=error,
                tool_result=tool_result,
            )
        )
        if answer.get("result_seq") is not None and self.next_seq is not None:
            self.next_seq = max(self.next_seq, answer["result_seq"] + 1)
        return answer

    def execute(
        self,
        step: Step,
        tool: Callable[[Step], Any],
        *,
        tool_result: Optional[Callable[[Step, Any, bool], Body]] = None,
    ) -> Dict[str, Any]:
        """Self-fences, runs ``tool(step)`` and completes the step with its tool_result entry.

        ``tool`` returns the result (bytes, or anything JSON; None is recorded as empty bytes,
        since the API reads a null result as none); an exception it raises (other than the
        client's own) is the step's error. ``tool_result(step, value_or_error_text,
        is_error)`` makes the entry; by default the server's tool_result shape with ``text``.
        """
        self.start_tool(step)
        try:
            value = tool(step)
            value = b"" if value is None else value
            failed = False
        except RunledgerError:
            raise
        except Exception as e:  # the tool's failure is the step's outcome
            value, failed = f"{type(e).__name__}: {e}", True
        make = tool_result or _default_tool_result
        entry = make(step, value, failed)
        if failed:
            return self.complete(step, error=value, tool_result=entry)
        if isinstance(value, bytes):
            return self.complete(step, result_bytes=value, tool_result=entry)
        return self.complete(step, result=value, tool_result=entry)

    def append(self, kind: str, body: Body, *, raw: Optional[bool] = None) -> Dict[str, Any]:
        """Appends an entry at the transcript's next seq (a repeat answers the first answer)."""
        self._positions()
        answer = self._guard(
            lambda: self.client.append(
                self.run_id, self.generation, kind, body, expected_seq=self.next_seq, raw=raw
            )
        )
        self.next_seq = answer["seq"] + 1
        return answer

    def append_tool_result(self, step: Step, body: Body) -> Dict[str, Any]:
        """Appends a completed step's tool_result entry (linked to the step; a repeat answers
        the same entry)."""
        answer = self._guard(
            lambda: self.client.append(
                self.run_id, self.generation, "tool_result", body, step_no=step.step_no
            )
        )
        if self.next_seq is not None:
            self.next_seq = max(self.next_seq, answer["seq"] + 1)
        return answer

    def finish(self, result: Any = None, *, status: str = "finished") -> Dict[str, Any]:
        """Ends the run (``finished`` or ``failed``) and stops holding it."""
        answer = self._guard(
            lambda: self.client.finish(self.run_id, self.generation, status=status, result=result)
        )
        self.close()
        return answer

    def release(self) -> Dict[str, Any]:
        """Hands the run back to the queue and stops holding it."""
        answer = self._guard(lambda: self.client.release(self.run_id, self.generation))
        self.close()
        return answer

    def close(self) -> None:
        """Stops heartbeating the run (it is left to its lease)."""
        self.incarnation.forget(self.run_id)

    # -- reads -------------------------------------------------------------------------------

    def entries(self, from_seq: int = 1) -> Iterator[Entry]:
        """The transcript's entries from ``from_seq``, as they are now."""
        return self.client.entries(self.run_id, from_seq=from_seq)

    def steps(self) -> List[Dict[str, Any]]:
        """The run's steps as the server has them."""
        return self.client.steps(self.run_id)


def _default_tool_result(step: Step, value: Any, is_error: bool) -> bytes:
    if isinstance(value, bytes):
        text = value.decode(errors="replace")
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return tool_result_body(step, text, is_error=is_error)
