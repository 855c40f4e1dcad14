// What the API's answers hold, in TypeScript's spelling, and their conversion from the wire's.
import type { Json } from "./errors.js";

export type RunStatus = "queued" | "running" | "finished" | "failed" | "interrupted" | "cancelled";
export const terminalStatuses: readonly RunStatus[] = ["finished", "failed", "interrupted", "cancelled"];

export function isTerminal(status: RunStatus): boolean {
  return terminalStatuses.includes(status);
}

export type EntryKind = "system" | "user" | "assistant" | "tool_result" | "synthetic";
export type EffectClass = "pure" | "idempotent" | "unsafe";
export type StepState = "intent" | "done" | "failed" | "settled";

/** Bytes as the client takes them: a string is sent as its UTF-8. */
export type Bytes = Uint8Array | string;

export function toBuffer(bytes: Bytes): Buffer {
  return typeof bytes === "string" ? Buffer.from(bytes, "utf8") : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function base64(bytes: Bytes): string {
  return toBuffer(bytes).toString("base64");
}

/** A run as `GET /v1/runs/{id}` answers it. Times are RFC 3339 strings in UTC. */
export interface RunRecord {
  runId: string;
  dispatchKey: string;
  threadKey: string;
  requester: string;
  status: RunStatus;
  /** The fencing token: every write names the generation it holds. */
  generation: number;
  owner: { slot: string; incarnation: string; via: "http" | "database" } | null;
  leaseExpiresAt: string | null;
  takeovers: number;
  profile: Json;
  budget: { wallS: number; maxSteps: number };
  input: Json;
  result: Json;
  parentRunId: string | null;
  parentInstanceId: string | null;
  depth: number;
  /** The transcript's head: its last seq (0 when empty) and that entry's chain hash. */
  transcript: { seq: number; sha256: string };
  /** How many steps the run has recorded. */
  steps: number;
  createdAt: string;
  claimedAt: string | null;
  finishedAt: string | null;
}

type Wire = { [key: string]: any };

export function runRecord(w: Wire): RunRecord {
  return {
    runId: w.run_id,
    dispatchKey: w.dispatch_key,
    threadKey: w.thread_key,
    requester: w.requester,
    status: w.status,
    generation: w.generation,
    owner: w.owner ?? null,
    leaseExpiresAt: w.lease_expires_at ?? null,
    takeovers: w.takeovers ?? 0,
    profile: w.profile ?? null,
    budget: { wallS: w.budget?.wall_s, maxSteps: w.budget?.max_steps },
    input: w.input ?? null,
    result: w.result ?? null,
    parentRunId: w.parent_run_id ?? null,
    parentInstanceId: w.parent_instance_id ?? null,
    depth: w.depth ?? 0,
    transcript: { seq: w.transcript?.seq ?? 0, sha256: w.transcript?.sha256 ?? "" },
    steps: w.steps ?? 0,
    createdAt: w.created_at,
    claimedAt: w.claimed_at ?? null,
    finishedAt: w.finished_at ?? null,
  };
}

/** One run a claim answered. */
export interface Claimed {
  runId: string;
  generation: number;
  /** Taken from another owner mid-run: settle it before going on. */
  reclaimed: boolean;
  leaseExpiresAt: string;
}

export function claimed(w: Wire): Claimed {
  return { runId: w.run_id, generation: w.generation, reclaimed: w.reclaimed, leaseExpiresAt: w.lease_expires_at };
}

/** A tool call written ahead: `POST /v1/runs/{id}/steps`, or one of a turn's intents. */
export interface Intent {
  stepNo: number;
  tool: string;
  /** The model's id for the call. */
  callId: string;
  args?: { [key: string]: Json };
}

export function intentWire(i: Intent): Wire {
  return { step_no: i.stepNo, tool: i.tool, call_id: i.callId, args: i.args ?? {} };
}

export interface Step {
  stepNo: number;
  tool: string;
  callId: string;
  args: { [key: string]: Json };
  effectKey: string;
  effectClass: EffectClass;
  state: StepState;
  intentGeneration: number;
  resultGeneration: number | null;
  resultBytes: number | null;
  error: string | null;
  /** How settlement decided the step, when it did: `{rule, ...}`. */
  settlement: Json;
  /** The seq of the step's tool_result entry, once it has one. */
  resultSeq: number | null;
  startedAt: string;
  finishedAt: string | null;
}

export function step(w: Wire): Step {
  return {
    stepNo: w.step_no,
    tool: w.tool,
    callId: w.call_id,
    args: w.args ?? {},
    effectKey: w.effect_key,
    effectClass: w.effect_class,
    state: w.state,
    intentGeneration: w.intent_generation,
    resultGeneration: w.result_generation ?? null,
    resultBytes: w.result_bytes ?? null,
    error: w.error ?? null,
    settlement: w.settlement ?? null,
    resultSeq: w.result_seq ?? null,
    startedAt: w.started_at,
    finishedAt: w.finished_at ?? null,
  };
}

export interface Entry {
  seq: number;
  kind: EntryKind;
  generation: number;
  /** The chain hash after this entry, in hex. */
  sha256: string;
  body: Buffer;
  createdAt: string;
}

export function entry(w: Wire): Entry {
  return {
    seq: w.seq,
    kind: w.kind,
    generation: w.generation,
    sha256: w.sha256,
    body: Buffer.from(w.body_base64, "base64"),
    createdAt: w.created_at,
  };
}

/** What settle wrote and what it hands back to the bot. */
export interface Settlement {
  /** Steps the server settled alone (a synthetic result, a missing tool_result entry). */
  settled: { stepNo: number; rule: string; effectKey: string }[];
  /** Pure and idempotent calls that were in flight: run each again and complete it. */
  rerun: { stepNo: number; rule: string; tool: string; callId: string; args: { [key: string]: Json }; effectKey: string }[];
  /** The run was taken over too often without progress; the server ended it `interrupted`. */
  interrupted: boolean;
}

export function settlement(w: Wire): Settlement {
  return {
    settled: (w.settled ?? []).map((s: Wire) => ({ stepNo: s.step_no, rule: s.rule, effectKey: s.effect_key })),
    rerun: (w.rerun ?? []).map((r: Wire) => ({
      stepNo: r.step_no,
      rule: r.rule,
      tool: r.tool,
      callId: r.call_id,
      args: r.args ?? {},
      effectKey: r.effect_key,
    })),
    interrupted: w.interrupted === true,
  };
}

export interface Verification {
  ok: boolean;
  entries: number;
  firstBadSeq?: number | null;
  problem?: string;
}

export function verification(w: Wire): Verification {
  const v: Verification = { ok: w.ok, entries: w.entries };
  if (!w.ok) {
    v.firstBadSeq = w.first_bad_seq ?? null;
    v.problem = w.problem;
  }
  return v;
}
