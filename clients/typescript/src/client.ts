// Client: one method per route of the bot's HTTP API, each repeated unchanged after a 503 or a
// lost answer (every write is safe to repeat; see Transport).
import type { Json } from "./errors.js";
import { tail, type TailItem, type TailOptions } from "./tail.js";
import { defaultRetryPolicy, Transport, type RetryEvent, type RetryPolicy } from "./transport.js";
import {
  base64,
  claimed,
  entry,
  intentWire,
  isTerminal,
  runRecord,
  settlement,
  step,
  toBuffer,
  verification,
  type Bytes,
  type Claimed,
  type EffectClass,
  type Entry,
  type EntryKind,
  type Intent,
  type RunRecord,
  type RunStatus,
  type Settlement,
  type Step,
  type Verification,
} from "./types.js";

export interface ClientOptions {
  /** The server, e.g. `http://127.0.0.1:8080` (the content of `<root>/api_url`). */
  baseUrl: string;
  /** A bot (or operator) token: `runledger token create --scope bot --name NAME`. */
  token: string;
  /** Repeats after a 503 or a lost answer; default 8 tries, 100 ms doubling to 5 s. */
  retry?: Partial<RetryPolicy>;
  /** How long an answer may take before it counts as lost (long-polls add their wait). */
  requestTimeoutMs?: number;
  /** Told of every repeat, before its pause (for logs and metrics). */
  onRetry?: (event: RetryEvent) => void;
  /** Entries larger than this are appended as raw bytes rather than base64 JSON. */
  rawAppendAboveBytes?: number;
}

export interface DispatchRequest {
  /** Decides identity: the same key answers the same run. */
  dispatchKey: string;
  threadKey: string;
  requester: string;
  profile?: Json;
  budget?: { wallS: number; maxSteps: number };
  /** A string is stored as its UTF-8; bytes as they are. */
  systemPrompt?: Bytes;
  input?: Json;
  parentRunId?: string;
  parentInstanceId?: string;
}

export interface Dispatched {
  run: RunRecord;
  /** False when the key already named this run (a repeat, perhaps of a lost answer of ours). */
  created: boolean;
}

export type RunFilter = { status: RunStatus } | { threadKey: string } | { requester: string };

export interface RunPage {
  runs: RunRecord[];
  /** The cursor of the next page, or null after the last. */
  next: string | null;
}

export interface ClaimRequest {
  slot: string;
  /** This process start's UUID. */
  incarnation: string;
  /** 1-100; default 1. */
  max?: number;
  /** Long-poll up to this long (≤ 30000) for a run. */
  waitMs?: number;
  signal?: AbortSignal;
}

export interface HeartbeatAnswer {
  /** Runs this incarnation no longer holds: stop driving them. */
  lost: string[];
  /** The new lease end of the runs still held, or null when none are. */
  leaseExpiresAt: string | null;
}

export interface TurnRequest {
  generation: number;
  /** The seq this entry must take (the head + 1): makes the turn safe to repeat. */
  expectedSeq: number;
  /** The assistant entry's bytes (a string as UTF-8). */
  body: Bytes;
  /** The turn's tool calls, written ahead in the same transaction as the entry. */
  intents?: Intent[];
}

export interface IntentRequest extends Intent {
  generation: number;
}

/** A step's outcome: exactly one of `result` (JSON), `resultBytes` and `error`. */
export type Outcome = { result: Json } | { resultBytes: Bytes } | { error: string };

export type CompletionRequest = Outcome & {
  generation: number;
  /** The step's tool_result entry, appended in the same call. */
  toolResult?: Bytes;
};

export interface AppendRequest {
  generation: number;
  kind: EntryKind;
  body: Bytes;
  /** The seq the entry must take. Without it (and without stepNo) the append is never repeated. */
  expectedSeq?: number;
  /** A tool_result entry names its step (and is then safe to repeat by it). */
  stepNo?: number;
}

export interface Appended {
  seq: number;
  sha256: string;
}

export interface RawEntry {
  seq: number;
  kind: EntryKind;
  generation: number;
  sha256: string;
  body: Buffer;
}

const maxWaitMs = 30_000;
// A long-poll's answer may take its wait and then this long.
const longPollSlackMs = 10_000;

function runPath(runId: string, rest = ""): string {
  return `/v1/runs/${encodeURIComponent(runId)}${rest}`;
}

function outcomeWire(outcome: Outcome): { [key: string]: unknown } {
  if ("error" in outcome) return { error: outcome.error };
  if ("resultBytes" in outcome) return { result_base64: base64(outcome.resultBytes) };
  return { result: outcome.result };
}

/** The bot's HTTP API. Stateless apart from its connections: safe to share. */
export class Client {
  readonly transport: Transport;
  private readonly rawAppendAboveBytes: number;

  constructor(options: ClientOptions) {
    this.transport = new Transport({
      baseUrl: options.baseUrl,
      token: options.token,
      retry: { ...defaultRetryPolicy, ...options.retry },
      requestTimeoutMs: options.requestTimeoutMs ?? 30_000,
      onRetry: options.onRetry,
    });
    this.rawAppendAboveBytes = options.rawAppendAboveBytes ?? 256 * 1024;
  }

  private async json(exchange: Parameters<Transport["send"]>[0]): Promise<any> {
    const answer = await this.transport.send(exchange);
    return JSON.parse(answer.body.toString("utf8"));
  }

  private post(path: string, body: unknown, extra: Partial<Parameters<Transport["send"]>[0]> = {}) {
    return this.json({ method: "POST", path, json: body, repeatable: true, ...extra });
  }

  private get(path: string, query?: { [name: string]: string | number | undefined }, extra = {}) {
    return this.json({ method: "GET", path, query, repeatable: true, ...extra });
  }

  /** `POST /v1/runs`: creates the run of `dispatchKey`, or answers the one it already names. */
  async dispatch(request: DispatchRequest): Promise<Dispatched> {
    const body: { [key: string]: unknown } = {
      dispatch_key: request.dispatchKey,
      thread_key: request.threadKey,
      requester: request.requester,
    };
    if (request.profile !== undefined) body["profile"] = request.profile;
    if (request.budget) body["budget"] = { wall_s: request.budget.wallS, max_steps: request.budget.maxSteps };
    if (request.systemPrompt !== undefined) {
      if (typeof request.systemPrompt === "string") body["system_prompt"] = request.systemPrompt;
      else body["system_prompt_base64"] = base64(request.systemPrompt);
    }
    if (request.input !== undefined) body["input"] = request.input;
    if (request.parentRunId) body["parent_run_id"] = request.parentRunId;
    if (request.parentInstanceId) body["parent_instance_id"] = request.parentInstanceId;
    const w = await this.post("/v1/runs", body);
    return { run: runRecord(w), created: w.created === true };
  }

  /** `GET /v1/runs/{id}`. */
  async run(runId: string): Promise<RunRecord> {
    return runRecord(await this.get(runPath(runId)));
  }

  /**
   * Waits until the run is terminal (finished, failed, interrupted, cancelled) or `timeoutMs`
   * passed, and answers it as it then is (`GET /v1/runs/{id}?wait_ms=`, ≤ 30 s an asking, asked
   * again until the timeout).
   */
  async wait(runId: string, options: { timeoutMs: number; signal?: AbortSignal }): Promise<RunRecord> {
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      const waitMs = Math.max(0, Math.min(maxWaitMs, deadline - Date.now()));
      const run = runRecord(
        await this.get(runPath(runId), { wait_ms: waitMs }, {
          timeoutMs: waitMs + longPollSlackMs,
          signal: options.signal,
        }),
      );
      if (isTerminal(run.status) || Date.now() >= deadline) return run;
    }
  }

  /** `GET /v1/runs?status=|thread_key=|requester=`: one page, newest first. */
  async listRuns(filter: RunFilter, page: { limit?: number; cursor?: string } = {}): Promise<RunPage> {
    const query = {
      status: "status" in filter ? filter.status : undefined,
      thread_key: "threadKey" in filter ? filter.threadKey : undefined,
      requester: "requester" in filter ? filter.requester : undefined,
      limit: page.limit,
      cursor: page.cursor,
    };
    const w = await this.get("/v1/runs", query);
    return { runs: w.runs.map(runRecord), next: w.next ?? null };
  }

  /** Every run of the filter, newest first, a page at a time. */
  async *runs(filter: RunFilter, pageSize = 100): AsyncGenerator<RunRecord> {
    let cursor: string | undefined;
    do {
      const page = await this.listRuns(filter, { limit: pageSize, ...(cursor ? { cursor } : {}) });
      yield* page.runs;
      cursor = page.next ?? undefined;
    } while (cursor);
  }

  /**
   * `POST /v1/runs/claim`: up to `max` runs for this incarnation of the slot. A new incarnation
   * takes the slot's runs of older ones at once (`reclaimed: true`: settle them first) and
   * supersedes them. With `waitMs` the server holds the request until a run is there.
   */
  async claim(request: ClaimRequest): Promise<Claimed[]> {
    const waitMs = request.waitMs ?? 0;
    const w = await this.post(
      "/v1/runs/claim",
      { slot: request.slot, incarnation: request.incarnation, max: request.max ?? 1, wait_ms: waitMs },
      { timeoutMs: waitMs + longPollSlackMs, signal: request.signal },
    );
    return w.runs.map(claimed);
  }

  /** `POST /v1/leases/heartbeat`: extends the leases of these runs held by the incarnation. */
  async heartbeat(
    incarnation: string,
    runs: { runId: string; generation: number }[],
    options: { timeoutMs?: number; retry?: RetryPolicy; signal?: AbortSignal } = {},
  ): Promise<HeartbeatAnswer> {
    const w = await this.post(
      "/v1/leases/heartbeat",
      { incarnation, runs: runs.map((r) => ({ run_id: r.runId, generation: r.generation })) },
      options,
    );
    return { lost: w.lost, leaseExpiresAt: w.lease_expires_at ?? null };
  }

  /** `POST /v1/runs/{id}/turns`: the assistant entry and its intents, in one write. */
  async turn(runId: string, request: TurnRequest): Promise<{ seq: number; effectKeys: string[] }> {
    const w = await this.post(runPath(runId, "/turns"), {
      generation: request.generation,
      expected_seq: request.expectedSeq,
      body_base64: base64(request.body),
      intents: (request.intents ?? []).map(intentWire),
    });
    return { seq: w.seq, effectKeys: w.effect_keys };
  }

  /** `POST /v1/runs/{id}/steps`: one call written ahead. */
  async intent(runId: string, request: IntentRequest): Promise<{ effectKey: string; effectClass: EffectClass }> {
    const w = await this.post(runPath(runId, "/steps"), { generation: request.generation, ...intentWire(request) });
    return { effectKey: w.effect_key, effectClass: w.effect_class };
  }

  /** `POST /v1/runs/{id}/steps/{n}/complete`: the step's outcome (and its tool_result entry). */
  async complete(runId: string, stepNo: number, request: CompletionRequest): Promise<Step> {
    const body: { [key: string]: unknown } = { generation: request.generation, ...outcomeWire(request) };
    if (request.toolResult !== undefined) body["tool_result_base64"] = base64(request.toolResult);
    return step(await this.post(runPath(runId, `/steps/${stepNo}/complete`), body));
  }

  /** `GET /v1/runs/{id}/steps`. */
  async steps(runId: string): Promise<Step[]> {
    return (await this.get(runPath(runId, "/steps"))).steps.map(step);
  }

  /**
   * `POST /v1/runs/{id}/transcript`: base64 JSON, or the raw bytes for a large entry. Repeated
   * after a lost answer only with `expectedSeq` or `stepNo` (either makes the repeat answer the
   * first answer; without them it would append the entry again).
   */
  async append(runId: string, request: AppendRequest): Promise<Appended> {
    const bytes = toBuffer(request.body);
    const repeatable = request.expectedSeq !== undefined || request.stepNo !== undefined;
    const path = runPath(runId, "/transcript");
    const w =
      bytes.byteLength > this.rawAppendAboveBytes
        ? await this.json({
            method: "POST",
            path,
            query: {
              generation: request.generation,
              kind: request.kind,
              expected_seq: request.expectedSeq,
              step_no: request.stepNo,
            },
            bytes,
            repeatable,
          })
        : await this.json({
            method: "POST",
            path,
            json: {
              generation: request.generation,
              kind: request.kind,
              body_base64: bytes.toString("base64"),
              ...(request.expectedSeq !== undefined ? { expected_seq: request.expectedSeq } : {}),
              ...(request.stepNo !== undefined ? { step_no: request.stepNo } : {}),
            },
            repeatable,
          });
    return { seq: w.seq, sha256: w.sha256 };
  }

  /** `GET /v1/runs/{id}/transcript?from=&limit=`: one page of entries. */
  async read(runId: string, page: { from?: number; limit?: number } = {}): Promise<{ entries: Entry[]; next: number | null }> {
    const w = await this.get(runPath(runId, "/transcript"), { from: page.from, limit: page.limit });
    return { entries: w.entries.map(entry), next: w.next ?? null };
  }

  /** Every entry from `from` to the head as it is now, a page at a time. */
  async *entries(runId: string, from = 1): AsyncGenerator<Entry> {
    for (let next: number | null = from; next !== null; ) {
      const page = await this.read(runId, { from: next });
      yield* page.entries;
      next = page.next;
    }
  }

  /** `GET /v1/runs/{id}/transcript/{seq}`: one entry's raw bytes. */
  async entry(runId: string, seq: number): Promise<RawEntry> {
    const answer = await this.transport.send({
      method: "GET",
      path: runPath(runId, `/transcript/${seq}`),
      accept: "application/octet-stream",
      repeatable: true,
    });
    return {
      seq,
      kind: answer.headers.get("x-entry-kind") as EntryKind,
      generation: Number(answer.headers.get("x-entry-generation")),
      sha256: answer.headers.get("x-entry-sha256") ?? "",
      body: answer.body,
    };
  }

  /**
   * Follows the transcript live (`GET /v1/runs/{id}/transcript` as Server-Sent Events): the
   * entries from `from`, then each new one, then `{type: "end", status}` once the run is terminal.
   * A dropped stream is resumed with `Last-Event-ID`, so nothing is missed or repeated.
   */
  tail(runId: string, options: TailOptions = {}): AsyncGenerator<TailItem> {
    return tail(this.transport, runPath(runId, "/transcript"), options);
  }

  /** `GET /v1/runs/{id}/verify`: recomputes the transcript's hash chain. */
  async verify(runId: string): Promise<Verification> {
    return verification(await this.get(runPath(runId, "/verify")));
  }

  /** `POST /v1/runs/{id}/settle`: after a reclaim, settles the calls that were in flight. */
  async settle(runId: string, generation: number): Promise<Settlement> {
    return settlement(await this.post(runPath(runId, "/settle"), { generation }));
  }

  /** `POST /v1/runs/{id}/finish` with `finished` or `failed` and the run's result. */
  async finish(
    runId: string,
    request: { generation: number; status?: "finished" | "failed"; result?: Json },
  ): Promise<RunRecord> {
    const body: { [key: string]: unknown } = { generation: request.generation, status: request.status ?? "finished" };
    if (request.result !== undefined) body["result"] = request.result;
    return runRecord(await this.post(runPath(runId, "/finish"), body));
  }

  /** `POST /v1/runs/{id}/release`: hands the run back to the queue. */
  async release(runId: string, generation: number): Promise<RunRecord> {
    return runRecord(await this.post(runPath(runId, "/release"), { generation }));
  }

  /** `GET /readyz`: whether the server reaches its database. */
  async ready(): Promise<boolean> {
    try {
      await this.transport.send({ method: "GET", path: "/readyz", repeatable: false });
      return true;
    } catch {
      return false;
    }
  }
}
