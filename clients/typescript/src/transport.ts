// One HTTP exchange with the server over Node's built-in fetch, and the repeats of an exchange
// whose answer was "not now" (503) or never arrived.
import { errorFromAnswer, RunledgerError, Unavailable } from "./errors.js";

/** How often and how patiently an exchange is repeated. */
export interface RetryPolicy {
  /** Tries in all, the first included (1: never repeat). */
  attempts: number;
  /** The first pause; each next one doubles, up to `maxDelayMs`. Half of each pause is random. */
  initialDelayMs: number;
  maxDelayMs: number;
}

export const defaultRetryPolicy: RetryPolicy = { attempts: 8, initialDelayMs: 100, maxDelayMs: 5_000 };

/** What `onRetry` is told before a pause and a repeat of the identical request. */
export interface RetryEvent {
  method: string;
  path: string;
  /** The try that failed, from 1. */
  attempt: number;
  delayMs: number;
  error: RunledgerError;
}

export interface TransportOptions {
  baseUrl: string;
  token: string;
  retry: RetryPolicy;
  requestTimeoutMs: number;
  onRetry: ((event: RetryEvent) => void) | undefined;
}

export interface Exchange {
  method: "GET" | "POST";
  path: string;
  query?: { [name: string]: string | number | undefined };
  json?: unknown;
  bytes?: Uint8Array;
  accept?: string;
  headers?: { [name: string]: string };
  /** How long the answer may take before it counts as lost. */
  timeoutMs?: number;
  /**
   * Whether the identical request may be sent again after a 503 or a lost answer. Every route is
   * safe to repeat except an append that carries neither expected_seq nor a step_no.
   */
  repeatable: boolean;
  retry?: RetryPolicy;
  signal?: AbortSignal | undefined;
}

export interface Answer {
  status: number;
  headers: Headers;
  body: Buffer;
}

/** A pause that ends early, rejecting, when `signal` aborts. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }
    function aborted() {
      clearTimeout(timer);
      reject(signal?.reason);
    }
    signal?.addEventListener("abort", aborted, { once: true });
  });
}

/** The pause before try `attempt + 1`: exponential, half of it random, at least `floorMs`. */
export function backoffDelay(policy: RetryPolicy, attempt: number, floorMs = 0): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (attempt - 1));
  const jittered = ceiling / 2 + Math.random() * (ceiling / 2);
  return Math.min(policy.maxDelayMs, Math.max(jittered, floorMs));
}

/** A controller aborted by the caller's signal or by a timeout, whichever comes first. */
export class Deadline {
  readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private readonly onCallerAbort: () => void;
  timedOut = false;

  constructor(
    timeoutMs: number,
    private readonly caller: AbortSignal | undefined,
  ) {
    this.onCallerAbort = () => this.controller.abort(caller?.reason);
    if (caller?.aborted) this.onCallerAbort();
    caller?.addEventListener("abort", this.onCallerAbort, { once: true });
    this.restart(timeoutMs);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Starts the timeout again (a stream that keeps sending is not timed out). */
  restart(timeoutMs: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
  }

  /** Whether the caller, not the timeout, ended it. */
  get callerAborted(): boolean {
    return this.caller?.aborted === true;
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.caller?.removeEventListener("abort", this.onCallerAbort);
  }
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: string }).code;
    return `${error.message}: ${code ? code + " " : ""}${cause.message}`;
  }
  return error.message;
}

/** A failure without an answer: the request may or may not have been carried out. */
export function lostAnswer(method: string, path: string, error: unknown): Unavailable {
  return new Unavailable({
    code: "unavailable",
    message: `no answer to ${method} ${path}: ${describe(error)}`,
    status: 0,
    cause: error,
  });
}

export class Transport {
  constructor(readonly options: TransportOptions) {}

  url(path: string, query?: Exchange["query"]): string {
    const url = new URL(path, this.options.baseUrl);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  headers(extra?: { [name: string]: string }): { [name: string]: string } {
    return { authorization: `Bearer ${this.options.token}`, ...extra };
  }

  /**
   * Sends the exchange, repeating the identical request after a 503 or a lost answer (when it is
   * repeatable) with bounded, jittered backoff. A success (2xx) is returned; any other answer is
   * thrown as its typed error.
   */
  async send(exchange: Exchange): Promise<Answer> {
    const policy = exchange.retry ?? this.options.retry;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once(exchange);
      } catch (error) {
        const last = attempt >= policy.attempts || !exchange.repeatable;
        if (!(error instanceof Unavailable) || last || exchange.signal?.aborted) throw error;
        const delayMs = backoffDelay(policy, attempt, error.retryAfterMs ?? 0);
        this.options.onRetry?.({ method: exchange.method, path: exchange.path, attempt, delayMs, error });
        await pause(delayMs, exchange.signal);
      }
    }
  }

  private async once(exchange: Exchange): Promise<Answer> {
    const headers = this.headers({ accept: exchange.accept ?? "application/json", ...exchange.headers });
    let body: string | Uint8Array | undefined;
    if (exchange.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(exchange.json);
    } else if (exchange.bytes !== undefined) {
      headers["content-type"] = "application/octet-stream";
      body = exchange.bytes;
    }
    const deadline = new Deadline(exchange.timeoutMs ?? this.options.requestTimeoutMs, exchange.signal);
    try {
      const response = await fetch(this.url(exchange.path, exchange.query), {
        method: exchange.method,
        headers,
        body,
        signal: deadline.signal,
      });
      // The whole body, under the same deadline: a reset mid-body is a lost answer too.
      const bytes = Buffer.from(await response.arrayBuffer());
      if (response.ok) return { status: response.status, headers: response.headers, body: bytes };
      let parsed: unknown;
      try {
        parsed = JSON.parse(bytes.toString("utf8"));
      } catch {
        parsed = undefined;
      }
      throw errorFromAnswer(response.status, parsed, response.headers);
    } catch (error) {
      if (error instanceof RunledgerError) throw error;
      if (deadline.callerAborted) throw exchange.signal?.reason ?? error;
      throw lostAnswer(exchange.method, exchange.path, error);
    } finally {
      deadline.dispose();
    }
  }
}
