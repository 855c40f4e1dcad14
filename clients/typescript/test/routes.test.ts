// Every bot route through the client against a real server: what each answers.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Bot, type Intent } from "../src/index.js";
import { clearQueue as clearQueueOf, heldRun, serverForTests, uniqueKey as key } from "./support/suite.js";

const suite = serverForTests({ effectClasses: "pure: read_*\nidempotent: write_*\n" });
const clearQueue = () => clearQueueOf(suite.client);
const dispatchAndClaim = () => heldRun(suite.client);

test("dispatch creates a run once per key; get answers it with its input, profile and budget", async () => {
  const k = key();
  const request = {
    dispatchKey: k,
    threadKey: "t-" + k,
    requester: "ts",
    profile: { script: { turns: [] } },
    budget: { wallS: 600, maxSteps: 7 },
    input: { task: "fix it", n: 1 },
    systemPrompt: new Uint8Array([0, 1, 2, 255]),
  };
  const first = await suite.client.dispatch(request);
  assert.equal(first.created, true);
  assert.equal(first.run.status, "queued");
  assert.equal(first.run.dispatchKey, k);
  const again = await suite.client.dispatch(request);
  assert.equal(again.created, false);
  assert.equal(again.run.runId, first.run.runId);
  const run = await suite.client.run(first.run.runId);
  assert.deepEqual(run.input, { task: "fix it", n: 1 });
  assert.deepEqual(run.profile, { script: { turns: [] } });
  assert.deepEqual(run.budget, { wallS: 600, maxSteps: 7 });
  assert.deepEqual(run.transcript.seq, 0);
  assert.equal(run.owner, null);
});

test("list by thread, requester and status, a page at a time", async () => {
  const requester = "lister-" + randomUUID().slice(0, 8);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const k = key();
    ids.push((await suite.client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester })).run.runId);
  }
  const page = await suite.client.listRuns({ requester }, { limit: 2 });
  assert.equal(page.runs.length, 2);
  assert.ok(page.next);
  const all: string[] = [];
  for await (const run of suite.client.runs({ requester }, 2)) all.push(run.runId);
  assert.deepEqual(all, [...ids].reverse(), "newest first, every page");
  const byThread = await suite.client.listRuns({ threadKey: (await suite.client.run(ids[0]!)).threadKey });
  assert.deepEqual(byThread.runs.map((r) => r.runId), [ids[0]]);
  assert.equal(byThread.next, null);
  const queued = await suite.client.listRuns({ status: "queued" }, { limit: 1000 });
  assert.ok(ids.every((id) => queued.runs.some((r) => r.runId === id)));
});

test("claim answers the run and its generation; a long-poll waits for a dispatch; heartbeat extends", async () => {
  const slot = "poll-" + randomUUID().slice(0, 8);
  const incarnation = randomUUID();
  await clearQueue();
  const polling = suite.client.claim({ slot, incarnation, waitMs: 20_000 });
  const started = Date.now();
  const k = key();
  const { run } = await suite.client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "ts" });
  const [claim] = await polling;
  assert.ok(claim);
  assert.equal(claim.runId, run.runId);
  assert.equal(claim.reclaimed, false);
  assert.ok(Date.now() - started < 10_000, "answered at the dispatch, not the deadline");
  const before = Date.parse(claim.leaseExpiresAt);
  const beat = await suite.client.heartbeat(incarnation, [{ runId: claim.runId, generation: claim.generation }]);
  assert.deepEqual(beat.lost, []);
  assert.ok(beat.leaseExpiresAt && Date.parse(beat.leaseExpiresAt) >= before);
  const owned = await suite.client.run(claim.runId);
  assert.equal(owned.status, "running");
  assert.deepEqual(owned.owner, { slot, incarnation, via: "http" });
  const stale = await suite.client.heartbeat(incarnation, [{ runId: claim.runId, generation: claim.generation + 1 }]);
  assert.deepEqual(stale.lost, [claim.runId], "a generation it does not hold is lost");
});

test("a turn with intents, an intent, completions with tool_result, steps", async () => {
  const h = await dispatchAndClaim();
  const intents: Intent[] = [
    { stepNo: 1, tool: "read_file", callId: "c1", args: { path: "a" } },
    { stepNo: 2, tool: "bash", callId: "c2", args: { cmd: "ls" } },
  ];
  const turn = await suite.client.turn(h.runId, { generation: h.generation, expectedSeq: 1, body: '{"role":"assistant"}', intents });
  assert.deepEqual(turn, { seq: 1, effectKeys: [h.runId + "/1", h.runId + "/2"] });
  const third = await suite.client.intent(h.runId, { generation: h.generation, stepNo: 3, tool: "write_x", callId: "c3", args: { a: 1 } });
  assert.deepEqual(third, { effectKey: h.runId + "/3", effectClass: "idempotent" });
  const one = await suite.client.complete(h.runId, 1, { generation: h.generation, result: { text: "A" }, toolResult: "tool said A" });
  assert.equal(one.state, "done");
  assert.equal(one.resultSeq, 2);
  assert.equal(one.effectClass, "pure");
  const two = await suite.client.complete(h.runId, 2, { generation: h.generation, error: "exit 1" });
  assert.equal(two.state, "failed");
  assert.equal(two.error, "exit 1");
  assert.equal(two.resultSeq, null);
  const three = await suite.client.complete(h.runId, 3, { generation: h.generation, resultBytes: new Uint8Array([1, 2, 3]) });
  assert.equal(three.resultBytes, 3);
  const steps = await suite.client.steps(h.runId);
  assert.deepEqual(steps.map((s) => [s.stepNo, s.tool, s.callId, s.state, s.effectClass]), [
    [1, "read_file", "c1", "done", "pure"],
    [2, "bash", "c2", "failed", "unsafe"],
    [3, "write_x", "c3", "done", "idempotent"],
  ]);
  assert.deepEqual(steps[0]!.args, { path: "a" });
  assert.equal(steps[0]!.intentGeneration, h.generation);
  const run = await suite.client.run(h.runId);
  assert.equal(run.steps, 3);
  assert.equal(run.transcript.seq, 2);
});

test("appends as base64 JSON and as raw bytes; read in pages; one entry's bytes; verify", async () => {
  const h = await dispatchAndClaim();
  const small = await suite.client.append(h.runId, { generation: h.generation, kind: "user", body: "hello", expectedSeq: 1 });
  assert.equal(small.seq, 1);
  assert.match(small.sha256, /^[0-9a-f]{64}$/);
  // Past the raw threshold (256 KiB): sent as application/octet-stream with the fields in the query.
  const large = Buffer.alloc(300 * 1024);
  for (let i = 0; i < large.length; i++) large[i] = (i * 7) % 256;
  const big = await suite.client.append(h.runId, { generation: h.generation, kind: "assistant", body: large, expectedSeq: 2 });
  assert.equal(big.seq, 2);
  const unkeyed = await suite.client.append(h.runId, { generation: h.generation, kind: "user", body: "no seq" });
  assert.equal(unkeyed.seq, 3);
  const first = await suite.client.read(h.runId, { from: 1, limit: 1 });
  assert.equal(first.entries.length, 1);
  assert.equal(first.entries[0]!.body.toString(), "hello");
  assert.equal(first.entries[0]!.kind, "user");
  assert.equal(first.entries[0]!.sha256, small.sha256);
  assert.equal(first.next, 2);
  const all = [];
  for await (const e of suite.client.entries(h.runId)) all.push(e);
  assert.deepEqual(all.map((e) => e.seq), [1, 2, 3]);
  assert.ok(all[1]!.body.equals(large));
  const raw = await suite.client.entry(h.runId, 2);
  assert.ok(raw.body.equals(large));
  assert.equal(raw.kind, "assistant");
  assert.equal(raw.sha256, big.sha256);
  assert.equal(raw.generation, h.generation);
  assert.deepEqual(await suite.client.verify(h.runId), { ok: true, entries: 3 });
});

test("settle after a takeover by a new incarnation; finish; release and claim again", async () => {
  const h = await dispatchAndClaim();
  await suite.client.intent(h.runId, { generation: h.generation, stepNo: 1, tool: "bash", callId: "c1", args: {} });
  await suite.client.intent(h.runId, { generation: h.generation, stepNo: 2, tool: "read_x", callId: "c2", args: { p: 1 } });
  const [taken] = await suite.client.claim({ slot: h.slot, incarnation: randomUUID() });
  assert.ok(taken);
  assert.equal(taken.runId, h.runId);
  assert.equal(taken.reclaimed, true);
  assert.ok(taken.generation > h.generation);
  const settled = await suite.client.settle(h.runId, taken.generation);
  assert.equal(settled.interrupted, false);
  assert.deepEqual(settled.settled, [{ stepNo: 1, rule: "synthetic_unsafe", effectKey: h.runId + "/1" }]);
  assert.deepEqual(settled.rerun, [
    { stepNo: 2, rule: "rerun_pure", tool: "read_x", callId: "c2", args: { p: 1 }, effectKey: h.runId + "/2" },
  ]);
  const synthetic = JSON.parse((await suite.client.entry(h.runId, 1)).body.toString());
  assert.equal(synthetic.synthetic, true);
  assert.equal(synthetic.call_id, "c1");
  assert.deepEqual((await suite.client.settle(h.runId, taken.generation)).settled, [], "a second settle writes nothing");
  await suite.client.complete(h.runId, 2, { generation: taken.generation, result: "again", toolResult: "again" });

  await clearQueue();
  const released = await suite.client.release(h.runId, taken.generation);
  assert.equal(released.status, "queued");
  const [again] = await suite.client.claim({ slot: "other-" + h.slot, incarnation: randomUUID() });
  assert.ok(again);
  assert.equal(again.runId, h.runId);
  const done = await suite.client.finish(h.runId, { generation: again.generation, result: { answer: 42 } });
  assert.equal(done.status, "finished");
  assert.deepEqual(done.result, { answer: 42 });
  assert.ok(done.finishedAt);
  const failedRun = await dispatchAndClaim();
  const failed = await suite.client.finish(failedRun.runId, { generation: failedRun.generation, status: "failed", result: "no" });
  assert.equal(failed.status, "failed");
});

test("the Run helper: claim, turn with intents, tools, completions, an append, finish", async () => {
  await clearQueue();
  const k = key();
  const { run: dispatched } = await suite.client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "ts", input: { n: 2 } });
  const bot = new Bot(suite.client, { slot: "helper-" + k });
  try {
    const run = await bot.next({ waitMs: 5_000 });
    assert.ok(run);
    assert.equal(run.runId, dispatched.runId);
    assert.equal(run.reclaimed, false);
    assert.deepEqual(run.record.input, { n: 2 });
    await run.append("user", "please add");
    const intents = [
      { stepNo: 1, tool: "bash", callId: "a", args: { cmd: "echo 1" } },
      { stepNo: 2, tool: "bash", callId: "b", args: { cmd: "echo 2" } },
    ];
    const turn = await run.turn(JSON.stringify({ role: "assistant", calls: ["a", "b"] }), intents);
    assert.equal(turn.seq, 2);
    for (const intent of intents) {
      const step = await run.callTool(intent.stepNo, async (signal) => {
        assert.equal(signal.aborted, false);
        return { result: { out: intent.args.cmd }, toolResult: `ran ${intent.callId}` };
      });
      assert.equal(step.state, "done");
    }
    assert.equal(run.seq, 4);
    await run.append("assistant", "done");
    const record = await run.finish({ answer: 3 });
    assert.equal(record.status, "finished");
    const kinds = (await run.transcript()).map((e) => e.kind);
    assert.deepEqual(kinds, ["user", "assistant", "tool_result", "tool_result", "assistant"]);
    assert.equal(bot.heartbeats.isHeld(run.runId), false, "a finished run is no longer heartbeated");
  } finally {
    await bot.stop();
  }
});

test("the heartbeat loop batches every held run into one call and keeps their leases", async () => {
  const slot = "beat-" + randomUUID().slice(0, 8);
  const requester = "beat-" + randomUUID().slice(0, 8);
  await clearQueue();
  for (let i = 0; i < 3; i++) {
    const k = key();
    await suite.client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester });
  }
  const bot = new Bot(suite.client, { slot, heartbeatIntervalMs: 100 });
  try {
    const held = await bot.claim({ max: 10 });
    assert.equal(held.length, 3);
    const before = held.map((r) => bot.heartbeats.confirmedAt(r.runId)!);
    await new Promise((resolve) => setTimeout(resolve, 350));
    const afterwards = held.map((r) => bot.heartbeats.confirmedAt(r.runId)!);
    for (let i = 0; i < 3; i++) assert.ok(afterwards[i]! > before[i]!, "each run's lease was confirmed again");
    assert.equal(new Set(afterwards).size, 1, "by one heartbeat: the same confirmation time for all");
    for (const run of held) await run.finish();
  } finally {
    await bot.stop();
  }
});
