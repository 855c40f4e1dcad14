// The server's error envelope as typed errors: one base class, a subclass per code a bot acts on.

/** A JSON value as the API sends and takes it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * Every error this client throws about the API: the server's envelope `{code, message, details,
 * request_id, retryable}` with the HTTP status, or (status 0) a failure of the client's own, such
 * as an answer that never arrived.
 */
export class RunledgerError extends Error {
  /** The envelope's code: `fenced`, `conflict`, `not_found`, ... */
  readonly code: string;
  readonly details: { [key: string]: Json };
  /** The server's request id (also in its log), when the server answered. */
  readonly requestId: string | undefined;
  /** The HTTP status; 0 when no answer arrived. */
  readonly status: number;
  /** Whether repeating the identical request may succeed. */
  readonly retryable: boolean;

  constructor(init: {
    code: string;
    message: string;
    details?: { [key: string]: Json } | undefined;
    requestId?: string | undefined;
    status: number;
    retryable?: boolean | undefined;
    cause?: unknown;
  }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.details = init.details ?? {};
    this.requestId = init.requestId;
    this.status = init.status;
    this.retryable = init.retryable ?? false;
  }
}

/** 409 `fenced`: the run moved on to another generation. Stop driving it at once. */
export class Fenced extends RunledgerError {}

/**
 * The client refused to start a tool: the run's lease could not be confirmed in time (the last
 * good heartbeat covering it is older than the lease minus the margin, and a heartbeat now did
 * not confirm it), or a heartbeat reported it lost. Like `Fenced`: stop driving the run.
 */
export class SelfFenced extends Fenced {}

/** 409 `superseded`: a newer incarnation of this slot exists; this one is refused for good. */
export class Superseded extends RunledgerError {}

/** 409 `conflict`: another write already holds this place (another turn at the seq, another outcome). */
export class Conflict extends RunledgerError {}

/** 409 `thread_busy`: the thread already has a live run (`liveRunId`). */
export class ThreadBusy extends RunledgerError {
  get liveRunId(): string | undefined {
    const id = this.details["live_run_id"];
    return typeof id === "string" ? id : undefined;
  }
}

/** 409 `budget_exhausted`: the run's budget is spent; the server finished it as failed. */
export class BudgetExhausted extends RunledgerError {}

/** 404 `not_found`. */
export class NotFound extends RunledgerError {}

/** 401 `unauthenticated`: the token is missing, unknown or revoked. */
export class Unauthenticated extends RunledgerError {}

/** 403 `forbidden`: the token's scope, or a slot outside its glob. */
export class Forbidden extends RunledgerError {}

/** 422 `invalid_argument`: `field` names what was missing, mistyped or out of range. */
export class InvalidArgument extends RunledgerError {
  get field(): string | undefined {
    const field = this.details["field"];
    return typeof field === "string" ? field : undefined;
  }
}

/**
 * 503 `unavailable` (the server cannot now: database, pool, connection cap), or status 0: the
 * answer was lost (a reset, a refused connection, a timeout). Thrown once the client's bounded
 * retries of the identical request are spent.
 */
export class Unavailable extends RunledgerError {
  /** The server's Retry-After, in milliseconds, when it sent one. */
  readonly retryAfterMs: number | undefined;

  constructor(init: ConstructorParameters<typeof RunledgerError>[0] & { retryAfterMs?: number }) {
    super({ ...init, retryable: true });
    this.retryAfterMs = init.retryAfterMs;
  }
}

const byCode: { [code: string]: typeof RunledgerError } = {
  fenced: Fenced,
  superseded: Superseded,
  conflict: Conflict,
  thread_busy: ThreadBusy,
  budget_exhausted: BudgetExhausted,
  not_found: NotFound,
  unauthenticated: Unauthenticated,
  forbidden: Forbidden,
  invalid_argument: InvalidArgument,
};

function isObject(value: unknown): value is { [key: string]: Json } {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The typed error of an answer that is not a success. `body` is the parsed envelope when the
 * answer was JSON; anything else (a proxy's HTML page) still becomes an error naming the status.
 */
export function errorFromAnswer(
  status: number,
  body: unknown,
  headers: Headers,
): RunledgerError {
  const envelope = isObject(body) ? body : {};
  const code =
    typeof envelope["code"] === "string" ? envelope["code"] : status === 503 ? "unavailable" : "http_" + status;
  const message =
    typeof envelope["message"] === "string" ? envelope["message"] : `HTTP ${status} without an error envelope`;
  const init = {
    code,
    message,
    details: isObject(envelope["details"]) ? envelope["details"] : {},
    requestId:
      typeof envelope["request_id"] === "string"
        ? envelope["request_id"]
        : (headers.get("x-request-id") ?? undefined),
    status,
    retryable: envelope["retryable"] === true,
  };
  if (code === "unavailable") {
    const after = Number(headers.get("retry-after"));
    return new Unavailable(
      Number.isFinite(after) && after >= 0 ? { ...init, retryAfterMs: after * 1000 } : init,
    );
  }
  const Kind = byCode[code] ?? RunledgerError;
  return new Kind(init);
}
