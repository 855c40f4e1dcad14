// The server's error codes as the client's typed errors, and the repeats of a write whose answer
// was lost (a real reset between client and server) or was 503 (the database really cut).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import {
  BudgetExhausted,
  Client,
  Conflict,
  Fenced,
  Forbidden,
  InvalidArgument,
  NotFound,
  RunledgerError,
  Superseded,
  ThreadBusy,
  Unauthenticated,
  Unavailable,
  type RetryEvent,
} from "../src/index.js";
import { FaultyProxy } from "./support/proxy.js";
import { heldRun, serverForTests, uniqueKey as key } from "./support/suite.js";

const suite = serverForTests();
const held = (extra = {}) => heldRun(suite.client, extra);

async function rejects<E extends RunledgerError>(promise: Promise<unknown>, kind: new (...args: any[]) => E, code: string, status: number): Promise<E> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof kind, `expected ${kind.name}, got ${String(error)}`);
    assert.ok(error instanceof RunledgerError);
    assert.equal(error.code, code);
    assert.equal(error.status, status);
    if (status > 0) assert.ok(error.requestId, "the server's request id");
    assert.equal(typeof error.message, "string");
    return error;
  }
  assert.fail(`expected ${kind.name}, but it succeeded`);
}

test("fenced: a write under a generation that lost the run", async () => {
  const h = await held();
  await suite.client.release(h.runId, h.generation);
  const e = await rejects(suite.client.append(h.runId, { generation: h.generation, kind: "user", body: "late", expectedSeq: 1 }), Fenced, "fenced", 409);
  assert.equal(e.retryable, false);
});

test("superseded: the old incarnation after a new one claimed for the slot", async () => {
  const h = await held();
  await suite.client.claim({ slot: h.slot, incarnation: randomUUID() });
  await rejects(suite.client.heartbeat(h.incarnation, [{ runId: h.runId, generation: h.generation }]), Superseded, "superseded", 409);
  await rejects(suite.client.claim({ slot: h.slot, incarnation: h.incarnation }), Superseded, "superseded", 409);
});

test("conflict: another turn at a seq already written", async () => {
  const h = await held();
  await suite.client.turn(h.runId, { generation: h.generation, expectedSeq: 1, body: "first" });
  await rejects(suite.client.turn(h.runId, { generation: h.generation, expectedSeq: 1, body: "second" }), Conflict, "conflict", 409);
});

test("thread_busy: a dispatch into a thread with a live run names that run", async () => {
  const k = key();
  const { run } = await suite.client.dispatch({ dispatchKey: k, threadKey: "busy-" + k, requester: "ts" });
  const e = await rejects(suite.client.dispatch({ dispatchKey: key(), threadKey: "busy-" + k, requester: "ts" }), ThreadBusy, "thread_busy", 409);
  assert.equal(e.liveRunId, run.runId);
});

test("budget_exhausted: an intent past max_steps", async () => {
  const h = await held({ budget: { wallS: 600, maxSteps: 1 } });
  await rejects(
    suite.client.intent(h.runId, { generation: h.generation, stepNo: 2, tool: "bash", callId: "c2" }),
    BudgetExhausted,
    "budget_exhausted",
    409,
  );
  assert.equal((await suite.client.run(h.runId)).status, "failed");
});

test("not_found, unauthenticated, forbidden, invalid_argument", async () => {
  await rejects(suite.client.run(randomUUID()), NotFound, "not_found", 404);
  const stranger = new Client({ baseUrl: suite.server.baseUrl, token: "not-a-token" });
  await rejects(stranger.run(randomUUID()), Unauthenticated, "unauthenticated", 401);
  const narrow = new Client({ baseUrl: suite.server.baseUrl, token: suite.server.createToken("narrow", { slots: "py-*" }) });
  const forbidden = await rejects(narrow.claim({ slot: "ts-1", incarnation: randomUUID() }), Forbidden, "forbidden", 403);
  assert.equal(forbidden.details["slot"], "ts-1");
  const invalid = await rejects(suite.client.claim({ slot: "ts-1", incarnation: "not-a-uuid" }), InvalidArgument, "invalid_argument", 422);
  assert.equal(invalid.field, "incarnation");
});

test("unavailable: a 503 is repeated until the database is back, then answers", async () => {
  const retries: RetryEvent[] = [];
  const patient = new Client({
    baseUrl: suite.server.baseUrl,
    token: suite.server.token,
    retry: { attempts: 20, initialDelayMs: 50, maxDelayMs: 1_000 },
    onRetry: (event) => {
      retries.push(event);
      if (retries.length === 2) suite.server.reopenDatabase();
    },
  });
  const k = key();
  suite.server.cutDatabase();
  try {
    const { run, created } = await patient.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "ts" });
    assert.equal(created, true);
    assert.equal(run.dispatchKey, k);
  } finally {
    suite.server.reopenDatabase();
  }
  assert.ok(retries.length >= 2);
  assert.ok(retries[0]!.error instanceof Unavailable);
  assert.equal(retries[0]!.error.status, 503);
  assert.ok(retries[0]!.delayMs >= 1_000, "Retry-After (1 s) is respected");
});

test("unavailable: thrown once the bounded retries are spent", async () => {
  const hasty = new Client({ baseUrl: suite.server.baseUrl, token: suite.server.token, retry: { attempts: 2, initialDelayMs: 10, maxDelayMs: 10 } });
  let retries = 0;
  const counting = new Client({
    baseUrl: suite.server.baseUrl,
    token: suite.server.token,
    retry: { attempts: 3, initialDelayMs: 10, maxDelayMs: 10 },
    onRetry: () => retries++,
  });
  suite.server.cutDatabase();
  try {
    const e = await rejects(hasty.run(randomUUID()), Unavailable, "unavailable", 503);
    assert.equal(e.retryable, true);
    assert.equal((e as Unavailable).retryAfterMs, 1_000);
    await rejects(counting.run(randomUUID()), Unavailable, "unavailable", 503);
    assert.equal(retries, 2, "three tries in all");
  } finally {
    suite.server.reopenDatabase();
  }
});

test("a lost answer: every write repeated returns the first answer and writes nothing twice", async () => {
  const proxy = await FaultyProxy.start(suite.server.baseUrl);
  const retries: RetryEvent[] = [];
  const lossy = new Client({ baseUrl: proxy.url, token: suite.server.token, onRetry: (e) => retries.push(e) });
  try {
    const k = key();
    const lostDispatch = proxy.loseAnswerTo("POST /v1/runs");
    const dispatched = await lossy.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "ts" });
    await lostDispatch;
    assert.equal(retries.length, 1);
    assert.equal(retries[0]!.error.status, 0, "no answer: a lost one");
    assert.equal(dispatched.created, false, "the repeat found the run the lost answer created");
    assert.equal(suite.server.query(`SELECT count(*) FROM live_runs WHERE dispatch_key = '${k}'`), "1");

    const h = await held();
    const path = `/v1/runs/${h.runId}`;
    const lostTurn = proxy.loseAnswerTo(`POST ${path}/turns`);
    const turn = await lossy.turn(h.runId, {
      generation: h.generation,
      expectedSeq: 1,
      body: "turn",
      intents: [{ stepNo: 1, tool: "bash", callId: "c1", args: {} }],
    });
    await lostTurn;
    assert.deepEqual(turn, { seq: 1, effectKeys: [h.runId + "/1"] });

    const lostIntent = proxy.loseAnswerTo(`POST ${path}/steps`);
    const intent = await lossy.intent(h.runId, { generation: h.generation, stepNo: 2, tool: "bash", callId: "c2" });
    await lostIntent;
    assert.equal(intent.effectKey, h.runId + "/2");

    const lostCompletion = proxy.loseAnswerTo(`POST ${path}/steps/1/complete`);
    const done = await lossy.complete(h.runId, 1, { generation: h.generation, result: "ok", toolResult: "ok" });
    await lostCompletion;
    assert.equal(done.resultSeq, 2);

    const lostAppend = proxy.loseAnswerTo(`POST ${path}/transcript`);
    const appended = await lossy.append(h.runId, { generation: h.generation, kind: "user", body: "more", expectedSeq: 3 });
    await lostAppend;
    assert.equal(appended.seq, 3);

    const lostFinish = proxy.loseAnswerTo(`POST ${path}/finish`);
    const finished = await lossy.finish(h.runId, { generation: h.generation, result: { ok: true } });
    await lostFinish;
    assert.equal(finished.status, "finished");

    assert.equal(retries.length, 6, "one repeat per lost answer");
    const entries = [];
    for await (const e of suite.client.entries(h.runId)) entries.push([e.seq, e.kind, e.body.toString()]);
    assert.deepEqual(entries, [
      [1, "assistant", "turn"],
      [2, "tool_result", "ok"],
      [3, "user", "more"],
    ]);
    assert.equal((await suite.client.steps(h.runId)).length, 2);
    assert.deepEqual(await suite.client.verify(h.runId), { ok: true, entries: 3 });
  } finally {
    await proxy.close();
  }
});

test("an append without expected_seq or step_no is never repeated: its lost answer is thrown", async () => {
  const proxy = await FaultyProxy.start(suite.server.baseUrl);
  const lossy = new Client({ baseUrl: proxy.url, token: suite.server.token });
  try {
    const h = await held();
    const lost = proxy.loseAnswerTo(`POST /v1/runs/${h.runId}/transcript`);
    await rejects(lossy.append(h.runId, { generation: h.generation, kind: "user", body: "once" }), Unavailable, "unavailable", 0);
    await lost;
    assert.equal((await suite.client.run(h.runId)).transcript.seq, 1, "written once, not again");
  } finally {
    await proxy.close();
  }
});
