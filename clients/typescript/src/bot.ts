// A bot's side of the protocol: an incarnation of a slot that claims runs, keeps their leases with
// one batched heartbeat, refuses to start a tool on a lease it cannot confirm, settles what it
// reclaims, and writes every step ahead under the run's generation.
import { randomUUID } from "node:crypto";
import type { Client, CompletionRequest, Outcome } from "./client.js";
import { Fenced, RunledgerError, SelfFenced, Superseded, type Json } from "./errors.js";
import type { RetryPolicy } from "./transport.js";
import type { Bytes, EffectClass, Entry, EntryKind, Intent, RunRecord, Settlement, Step } from "./types.js";

export interface BotOptions {
  /** The slot this bot serves: a restarted bot uses the same slot with a new incarnation. */
  slot: string;
  /** This process start's UUID; a fresh one by default. */
  incarnation?: string;
  /**
   * The lease the server grants (`serve --lease-ms`, default 30000). The client also learns it
   * from each claim's `lease_expires_at` (clocks assumed to agree well within the margin) and
   * uses the shorter of the two.
   */
  leaseMs?: number;
  /** How often the heartbeat runs; default a third of the lease. */
  heartbeatIntervalMs?: number;
  /**
   * Self-fencing: a tool is not started when the last good heartbeat covering its run is older
   * than the lease minus this margin, unless a heartbeat now confirms the lease. Default a fifth
   * of the lease, at least 1 s.
   */
  selfFenceMarginMs?: number;
  /** Told when a heartbeat fails (it is tried again at the next interval). */
  onHeartbeatError?: (error: unknown) => void;
}

interface Held {
  generation: number;
  /** performance.now() when the last request that confirmed the lease was sent. */
  confirmedAt: number;
  lost: AbortController;
}

const heartbeatRetry: RetryPolicy = { attempts: 2, initialDelayMs: 100, maxDelayMs: 500 };

/**
 * The leases of one incarnation's runs, kept by one `POST /v1/leases/heartbeat` for all of them
 * every interval. A run the server reports lost (or every run, once the incarnation is
 * superseded) has its `signal` aborted and is dropped.
 */
export class Heartbeats {
  private readonly held = new Map<string, Held>();
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private stopped = true;
  private learnedLeaseMs: number | undefined;
  /** Set once the server refused this incarnation for good. */
  superseded = false;

  constructor(
    private readonly client: Client,
    readonly incarnation: string,
    private readonly options: Omit<BotOptions, "slot" | "incarnation"> = {},
  ) {}

  /** The lease in use: the configured one, or a shorter one learned from the server. */
  get leaseMs(): number {
    return Math.min(this.options.leaseMs ?? 30_000, this.learnedLeaseMs ?? Infinity);
  }

  get marginMs(): number {
    return this.options.selfFenceMarginMs ?? Math.max(1_000, this.leaseMs / 5);
  }

  get intervalMs(): number {
    return this.options.heartbeatIntervalMs ?? this.leaseMs / 3;
  }

  /** Learns the lease from an answer's `lease_expires_at` for a request sent at `sentAtWall`. */
  learnLease(leaseExpiresAt: string | null, sentAtWall: number): void {
    if (!leaseExpiresAt) return;
    const lease = Date.parse(leaseExpiresAt) - sentAtWall;
    if (Number.isFinite(lease) && lease > 0) {
      this.learnedLeaseMs = Math.min(this.learnedLeaseMs ?? Infinity, lease);
    }
  }

  /** Keeps the run's lease from now on; `confirmedAt` is when its claim was sent. */
  track(runId: string, generation: number, confirmedAt: number): AbortSignal {
    const held: Held = { generation, confirmedAt, lost: new AbortController() };
    this.held.set(runId, held);
    return held.lost.signal;
  }

  /** Stops keeping the run (finished, released, or lost). */
  untrack(runId: string): void {
    this.held.delete(runId);
  }

  /** Marks the run lost: its signal aborts with `reason`, and it is dropped. */
  lose(runId: string, reason: RunledgerError): void {
    const held = this.held.get(runId);
    if (!held) return;
    this.held.delete(runId);
    held.lost.abort(reason);
  }

  /** When the lease of the run was last confirmed (performance.now()), if it is held. */
  confirmedAt(runId: string): number | undefined {
    return this.held.get(runId)?.confirmedAt;
  }

  isHeld(runId: string): boolean {
    return this.held.has(runId);
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule();
  }

  /** Stops the loop and waits for a heartbeat in flight. The held runs are left to their leases. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inFlight?.catch(() => {}); // its failure was the loop's to report, not stop's
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(async () => {
      await this.beat().catch((error) => this.options.onHeartbeatError?.(error));
      this.schedule();
    }, this.intervalMs);
    this.timer.unref();
  }

  /**
   * One heartbeat of every held run now; callers at the same time share it. Throws when it
   * failed (the runs' confirmation is then unchanged).
   */
  beat(options: { timeoutMs?: number; attempts?: number } = {}): Promise<void> {
    this.inFlight ??= this.beatOnce(options).finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  private async beatOnce(options: { timeoutMs?: number; attempts?: number }): Promise<void> {
    const runs = [...this.held].map(([runId, h]) => ({ runId, generation: h.generation, held: h }));
    if (runs.length === 0 || this.superseded) return;
    const sentAt = performance.now();
    const sentAtWall = Date.now();
    try {
      const answer = await this.client.heartbeat(this.incarnation, runs, {
        timeoutMs: options.timeoutMs ?? Math.max(1_000, this.leaseMs / 6),
        retry: { ...heartbeatRetry, attempts: options.attempts ?? heartbeatRetry.attempts },
      });
      this.learnLease(answer.leaseExpiresAt, sentAtWall);
      const lost = new Set(answer.lost);
      for (const r of runs) {
        if (lost.has(r.runId)) {
          this.lose(r.runId, new Fenced({ code: "fenced", message: `run ${r.runId} was lost: the heartbeat no longer covers it`, status: 0 }));
        } else if (this.held.get(r.runId) === r.held) {
          r.held.confirmedAt = Math.max(r.held.confirmedAt, sentAt);
        }
      }
    } catch (error) {
      if (error instanceof Superseded) {
        this.superseded = true;
        for (const r of runs) this.lose(r.runId, error);
      }
      throw error;
    }
  }

  /**
   * Self-fencing: resolves when the run's lease is confirmed well enough to start a tool (its last
   * good heartbeat is younger than the lease minus the margin, or one sent now says so), and
   * otherwise throws `SelfFenced`.
   */
  async ensureLease(runId: string): Promise<void> {
    const fresh = () => {
      const at = this.confirmedAt(runId);
      return at !== undefined && performance.now() - at < this.leaseMs - this.marginMs;
    };
    if (!this.isHeld(runId)) throw this.refusal(runId, "this incarnation no longer holds it");
    if (fresh()) return;
    try {
      // A heartbeat of its own (not one in flight, which may take longer), within half the
      // margin: a refusal comes before the lease could have ended.
      await this.beatOnce({ timeoutMs: Math.max(200, this.marginMs / 2), attempts: 1 });
    } catch (error) {
      if (!this.isHeld(runId)) throw this.refusal(runId, "this incarnation no longer holds it", error);
      throw this.refusal(runId, "a heartbeat could not confirm its lease", error);
    }
    if (!this.isHeld(runId)) throw this.refusal(runId, "the heartbeat reported it lost");
    if (!fresh()) throw this.refusal(runId, "its lease could not be confirmed in time");
  }

  private refusal(runId: string, why: string, cause?: unknown): SelfFenced {
    return new SelfFenced({
      code: "fenced",
      message: `refusing to start a tool on run ${runId}: ${why}`,
      details: { run_id: runId },
      status: 0,
      cause,
    });
  }
}

/**
 * One incarnation of a slot: claims runs (settling those it reclaims) and keeps their leases.
 *
 * ```ts
 * const bot = new Bot(client, { slot: "ts-1" });
 * for (;;) {
 *   const run = await bot.next({ waitMs: 20_000 });
 *   if (!run) continue;
 *   for (const call of run.settlement?.rerun ?? []) await run.callTool(call.stepNo, () => rerun(call));
 *   const turn = await run.turn(modelReply, intents);
 *   for (const intent of intents) await run.callTool(intent.stepNo, (signal) => runTool(intent, signal));
 *   await run.finish({ answer: "done" });
 * }
 * ```
 */
export class Bot {
  readonly slot: string;
  readonly incarnation: string;
  readonly heartbeats: Heartbeats;

  constructor(
    readonly client: Client,
    options: BotOptions,
  ) {
    this.slot = options.slot;
    this.incarnation = options.incarnation ?? randomUUID();
    this.heartbeats = new Heartbeats(client, this.incarnation, options);
  }

  /**
   * Claims up to `max` runs, long-polling up to `waitMs` for the first. Each reclaimed run (taken
   * over from an older incarnation or an expired lease) is settled before it is returned, and one
   * the server then ended `interrupted` is skipped. Throws `Superseded` once a newer incarnation
   * of the slot exists.
   */
  async claim(options: { max?: number; waitMs?: number; signal?: AbortSignal } = {}): Promise<Run[]> {
    const sentAt = performance.now();
    const sentAtWall = Date.now();
    const claims = await this.client.claim({ slot: this.slot, incarnation: this.incarnation, ...options });
    this.heartbeats.start();
    // All are kept from now on, while each in turn is settled and read.
    const claimed = claims.map((c) => {
      this.heartbeats.learnLease(c.leaseExpiresAt, sentAtWall);
      return new Run(this, c.runId, c.generation, c.reclaimed, this.heartbeats.track(c.runId, c.generation, sentAt));
    });
    const runs: Run[] = [];
    for (const [i, run] of claimed.entries()) {
      const c = claims[i]!;
      try {
        if (c.reclaimed) {
          run.settlement = await run.settle();
          if (run.settlement.interrupted) {
            this.heartbeats.untrack(c.runId);
            continue;
          }
        }
        await run.refresh();
        runs.push(run);
      } catch (error) {
        this.heartbeats.untrack(c.runId);
        if (error instanceof Fenced) continue;  // it moved on since the claim: not ours to drive
        // Runs claimed but not handed out are left to their leases rather than kept alive here.
        for (const rest of claims.slice(i + 1)) this.heartbeats.untrack(rest.runId);
        throw error;
      }
    }
    return runs;
  }

  /** One run, or null when none came within `waitMs`. */
  async next(options: { waitMs?: number; signal?: AbortSignal } = {}): Promise<Run | null> {
    const [run] = await this.claim({ ...options, max: 1 });
    return run ?? null;
  }

  /** Stops the heartbeats; runs still held are left to their leases (or a successor's claim). */
  stop(): Promise<void> {
    return this.heartbeats.stop();
  }
}

/** A tool's outcome and the tool_result entry the model will read. */
export type ToolOutcome = Outcome & { toolResult?: Bytes };

/**
 * A run this bot holds under `generation`. Its writes carry the generation, appends and turns the
 * seq they must take (tracked from the head), so each is safe to repeat. A write answered
 * `fenced`, or a heartbeat that reports the run lost, aborts `signal`: stop driving the run then.
 */
export class Run {
  /** What settle answered, when the run was reclaimed. */
  settlement: Settlement | null = null;
  /** The run as last read (input, profile, budget...). */
  record!: RunRecord;
  /** The transcript's head seq as this run last wrote or read it. */
  seq = 0;

  constructor(
    readonly bot: Bot,
    readonly runId: string,
    readonly generation: number,
    readonly reclaimed: boolean,
    /** Aborted when the run is no longer this bot's (with the reason). */
    readonly signal: AbortSignal,
  ) {}

  private get client(): Client {
    return this.bot.client;
  }

  /** Whether the run was lost (fenced, or reported lost by a heartbeat). */
  get lost(): boolean {
    return this.signal.aborted;
  }

  private async write<T>(action: () => Promise<T>): Promise<T> {
    if (this.signal.aborted) throw this.signal.reason;
    try {
      return await action();
    } catch (error) {
      if (error instanceof Fenced) this.bot.heartbeats.lose(this.runId, error);
      throw error;
    }
  }

  /** Reads the run again (its record and its transcript head). */
  async refresh(): Promise<RunRecord> {
    this.record = await this.client.run(this.runId);
    this.seq = this.record.transcript.seq;
    return this.record;
  }

  /** Settles the calls that were in flight when the run changed hands (see `Settlement`). */
  settle(): Promise<Settlement> {
    return this.write(() => this.client.settle(this.runId, this.generation));
  }

  /** The model's turn: its assistant entry and the intents of its tool calls, in one write. */
  async turn(body: Bytes, intents: Intent[] = []): Promise<{ seq: number; effectKeys: string[] }> {
    const written = await this.write(() =>
      this.client.turn(this.runId, { generation: this.generation, expectedSeq: this.seq + 1, body, intents }),
    );
    this.seq = written.seq;
    return written;
  }

  /** One tool call written ahead (when it was not part of a turn). */
  intent(intent: Intent): Promise<{ effectKey: string; effectClass: EffectClass }> {
    return this.write(() => this.client.intent(this.runId, { generation: this.generation, ...intent }));
  }

  /**
   * Self-fencing: throws `SelfFenced` unless the run's lease is confirmed well enough to start a
   * tool now (see `BotOptions.selfFenceMarginMs`).
   */
  async ensureLease(): Promise<void> {
    if (this.signal.aborted) throw this.signal.reason;
    await this.bot.heartbeats.ensureLease(this.runId);
  }

  /**
   * Runs a tool call whose intent is written: checks the lease first (self-fencing), runs `tool`
   * with a signal aborted if the run is lost meanwhile, then completes the step with its outcome
   * and tool_result entry. A tool that throws leaves its step in flight (settlement decides it
   * after a takeover); complete it yourself to record a failure.
   */
  async callTool(stepNo: number, tool: (signal: AbortSignal) => Promise<ToolOutcome>): Promise<Step> {
    await this.ensureLease();
    const outcome = await tool(this.signal);
    return this.complete(stepNo, outcome);
  }

  /** Records a step's outcome (and its tool_result entry, which moves the head). */
  async complete(stepNo: number, outcome: ToolOutcome): Promise<Step> {
    const request = { ...outcome, generation: this.generation } as CompletionRequest;
    const done = await this.write(() => this.client.complete(this.runId, stepNo, request));
    if (done.resultSeq !== null) this.seq = Math.max(this.seq, done.resultSeq);
    return done;
  }

  /** Appends an entry at the head + 1. */
  async append(kind: EntryKind, body: Bytes): Promise<{ seq: number; sha256: string }> {
    const written = await this.write(() =>
      this.client.append(this.runId, { generation: this.generation, kind, body, expectedSeq: this.seq + 1 }),
    );
    this.seq = written.seq;
    return written;
  }

  steps(): Promise<Step[]> {
    return this.client.steps(this.runId);
  }

  /** The whole transcript as it is now. */
  async transcript(): Promise<Entry[]> {
    const entries: Entry[] = [];
    for await (const e of this.client.entries(this.runId)) entries.push(e);
    return entries;
  }

  /** Ends the run `finished` with its result. */
  async finish(result?: Json): Promise<RunRecord> {
    return this.end("finished", result);
  }

  /** Ends the run `failed`. */
  async fail(result?: Json): Promise<RunRecord> {
    return this.end("failed", result);
  }

  private async end(status: "finished" | "failed", result?: Json): Promise<RunRecord> {
    const record = await this.write(() =>
      this.client.finish(this.runId, { generation: this.generation, status, ...(result !== undefined ? { result } : {}) }),
    );
    this.bot.heartbeats.untrack(this.runId);
    this.record = record;
    return record;
  }

  /**
   * Hands the run back to the queue. A repeat after a lost answer is `fenced` (the run moved on):
   * either way the run is no longer this bot's, so that is not an error here.
   */
  async release(): Promise<void> {
    try {
      await this.client.release(this.runId, this.generation);
    } catch (error) {
      if (!(error instanceof Fenced)) throw error;
    }
    this.bot.heartbeats.untrack(this.runId);
  }
}
