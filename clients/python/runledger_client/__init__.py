"""A Python client of runledger's HTTP API for bots (standard library only).

    from runledger_client import Client, Incarnation, Intent

    client = Client("http://127.0.0.1:8080", token)
    with Incarnation(client, "py-1") as bot:
        for run in bot.runs(wait_ms=20_000):
            with run:
                ...  # see README.md: resume, turn, execute, finish

See README.md next to this package.
"""

from .client import (
    MAX_WAIT_MS,
    RAW_APPEND_BYTES,
    TERMINAL_STATUSES,
    Client,
    Entry,
    Intent,
    Settlement,
    Step,
    Tail,
)
from .errors import (
    AnswerLost,
    BudgetExhausted,
    Conflict,
    Fenced,
    Forbidden,
    Internal,
    InvalidArgument,
    LeaseLost,
    Malformed,
    NotFound,
    RunledgerError,
    Superseded,
    ThreadBusy,
    TooLarge,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
)
from .incarnation import Incarnation, Run, tool_result_body
from .transport import RetryPolicy

__all__ = [
    "AnswerLost",
    "BudgetExhausted",
    "Client",
    "Conflict",
    "Entry",
    "Fenced",
    "Forbidden",
    "Incarnation",
    "Intent",
    "Internal",
    "InvalidArgument",
    "LeaseLost",
    "MAX_WAIT_MS",
    "Malformed",
    "NotFound",
    "RAW_APPEND_BYTES",
    "RetryPolicy",
    "Run",
    "RunledgerError",
    "Settlement",
    "Step",
    "Superseded",
    "TERMINAL_STATUSES",
    "Tail",
    "ThreadBusy",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedMediaType",
    "tool_result_body",
]
