"""The server's error envelope as typed exceptions.

Every refusal of the API is ``{code, message, details, request_id, retryable}``; each code has its
own exception class, all derived from :class:`RunledgerError`, so a bot catches exactly what it
can act on: :class:`Fenced` means stop driving that run at once, :class:`Unavailable` was already
retried by the client before it reached you.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


class RunledgerError(Exception):
    """A refusal of the API (or a failure to reach it).

    Attributes: ``code`` (the envelope's code, e.g. ``"fenced"``), ``message``, ``details`` (a
    dict), ``request_id`` (the server's ``X-Request-Id``, ``None`` if no answer came), ``status``
    (the HTTP status, ``None`` if no answer came) and ``retryable``.
    """

    code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        details: Optional[Mapping[str, Any]] = None,
        request_id: Optional[str] = None,
        status: Optional[int] = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details = dict(details or {})
        self.request_id = request_id
        self.status = status
        self.retryable = retryable

    def __str__(self) -> str:
        where = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.code}: {self.message}{where}"


class Malformed(RunledgerError):
    """400: the request was not well-formed JSON or UTF-8."""

    code = "malformed"


class Unauthenticated(RunledgerError):
    """401: no token, or one that is unknown or revoked."""

    code = "unauthenticated"


class Forbidden(RunledgerError):
    """403: the token's scope, or a slot outside its glob."""

    code = "forbidden"


class NotFound(RunledgerError):
    """404: no such run, step, entry or route."""

    code = "not_found"


class Conflict(RunledgerError):
    """409: another value was already written where this request writes (a turn, an intent, an
    outcome, a finish), or ``expected_seq`` is not the transcript's next seq."""

    code = "conflict"


class Fenced(Conflict):
    """409: the run's generation moved on (taken over, released, cancelled, finished): this
    process no longer holds the run. Stop driving it at once; never retry."""

    code = "fenced"


class LeaseLost(Fenced):
    """Raised by the client itself (no server answer): the run's lease cannot be shown to be
    held — a heartbeat reported it lost, or no heartbeat succeeded within the lease minus the
    safety margin, even the synchronous one made to re-check. Do not start the tool."""

    code = "lease_lost"


class ThreadBusy(Conflict):
    """409: a dispatch into a thread that has a live run (``live_run_id``)."""

    code = "thread_busy"

    @property
    def live_run_id(self) -> Optional[str]:
        return self.details.get("live_run_id")


class Superseded(Conflict):
    """409: a newer incarnation of this slot claimed: this incarnation is refused for good. The
    process should stop (its runs now belong to its successor)."""

    code = "superseded"


class BudgetExhausted(Conflict):
    """409: the run's budget (steps or wall time) is spent; the server finished it failed."""

    code = "budget_exhausted"


class TooLarge(RunledgerError):
    """413: the body is over its route's limit."""

    code = "too_large"


class UnsupportedMediaType(RunledgerError):
    """415: the route does not take this Content-Type."""

    code = "unsupported_media_type"


class InvalidArgument(RunledgerError):
    """422: a field is missing, mistyped, unknown or out of range (``field`` names it)."""

    code = "invalid_argument"

    @property
    def field(self) -> Optional[str]:
        return self.details.get("field")


class Unavailable(RunledgerError):
    """503 (not now: the database, a pool, a cap), after the client's retries ran out."""

    code = "unavailable"


class AnswerLost(Unavailable):
    """No answer came (connection refused, reset or closed, a timeout), after the client's
    retries ran out, or for a request that is not safe to repeat. Whether a write landed is
    unknown."""

    code = "answer_lost"


class Internal(RunledgerError):
    """500: the server's own failure; its log has the request id."""

    code = "internal"


_BY_CODE = {
    cls.code: cls
    for cls in (
        Malformed,
        Unauthenticated,
        Forbidden,
        NotFound,
        Conflict,
        Fenced,
        ThreadBusy,
        Superseded,
        BudgetExhausted,
        TooLarge,
        UnsupportedMediaType,
        InvalidArgument,
        Unavailable,
        Internal,
    )
}


def error_from_answer(status: int, envelope: Any, request_id: Optional[str]) -> RunledgerError:
    """The exception for a refusal: by the envelope's code, or by the status when the body is not
    an envelope (a proxy's page, a 431)."""
    if isinstance(envelope, dict) and isinstance(envelope.get("code"), str):
        cls = _BY_CODE.get(envelope["code"], RunledgerError)
        return cls(
            str(envelope.get("message", "")),
            code=envelope["code"],
            details=envelope.get("details") if isinstance(envelope.get("details"), dict) else {},
            request_id=envelope.get("request_id") or request_id,
            status=status,
            retryable=bool(envelope.get("retryable", False)),
        )
    cls = {503: Unavailable, 500: Internal, 404: NotFound, 413: TooLarge}.get(status, RunledgerError)
    return cls(
        f"HTTP {status}",
        code=cls.code if cls is not RunledgerError else f"http_{status}",
        request_id=request_id,
        status=status,
        retryable=status == 503,
    )
