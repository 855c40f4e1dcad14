// Self-fencing against a real server with a 2 s lease: a tool is started only on a lease confirmed
// recently enough, or confirmed again by a heartbeat right then.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Bot, Client, Fenced, SelfFenced, Superseded, type Run } from "../src/index.js";
import { FaultyProxy } from "./support/proxy.js";
import { until } from "./support/server.js";
import { serverForTests } from "./support/suite.js";

const leaseMs = 2_000;
const marginMs = 1_000;
const suite = serverForTests({ leaseMs });

// A dispatch, and the run claimed by `bot` (other tests' runs are finished or held elsewhere).
async function claimed(bot: Bot): Promise<Run> {
  const k = "k-" + randomUUID();
  const { run } = await suite.client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "ts" });
  const claimedRun = await bot.next({ waitMs: 5_000 });
  assert.equal(claimedRun?.runId, run.runId);
  return claimedRun!;
}

async function intentOf(run: Run, stepNo: number): Promise<void> {
  await run.intent({ stepNo, tool: "bash", callId: "c" + stepNo, args: {} });
}

// Asserts that the tool of `stepNo` is refused, never started, with an error `matches` accepts.
async function assertRefused(run: Run, stepNo: number, matches: (error: unknown) => boolean): Promise<void> {
  let ran = false;
  const tool = async () => {
    ran = true;
    return { result: "must not run" };
  };
  await assert.rejects(run.callTool(stepNo, tool), (error) => matches(error));
  assert.equal(ran, false, "the tool never started");
}

const ageOf = (bot: Bot, run: Run) => performance.now() - bot.heartbeats.confirmedAt(run.runId)!;

test("a lease last confirmed too long ago is confirmed by a heartbeat first, then the tool runs", async () => {
  // No heartbeats of its own in this test: only the self-fencing check confirms the lease.
  const bot = new Bot(suite.client, { slot: "stale-" + randomUUID(), leaseMs, selfFenceMarginMs: marginMs, heartbeatIntervalMs: 3_600_000 });
  try {
    const run = await claimed(bot);
    await intentOf(run, 1);
    await until("the lease to be older than the lease minus the margin", () => ageOf(bot, run) > leaseMs - marginMs);
    let ran = false;
    const step = await run.callTool(1, async () => {
      ran = true;
      return { result: "ok", toolResult: "ok" };
    });
    assert.ok(ran);
    assert.equal(step.state, "done");
    assert.ok(ageOf(bot, run) < leaseMs - marginMs, "the check's heartbeat confirmed the lease");
    await run.finish();
  } finally {
    await bot.stop();
  }
});

test("cut off from the server, the bot refuses to start a tool before its lease could end", async () => {
  const proxy = await FaultyProxy.start(suite.server.baseUrl);
  const cutOff = new Client({ baseUrl: proxy.url, token: suite.server.token, retry: { attempts: 2, initialDelayMs: 50, maxDelayMs: 100 } });
  const bot = new Bot(cutOff, { slot: "cut-" + randomUUID(), leaseMs, selfFenceMarginMs: marginMs, heartbeatIntervalMs: 300 });
  try {
    const run = await claimed(bot);
    await intentOf(run, 1);
    await intentOf(run, 2);
    await run.callTool(1, async () => ({ result: "before the cut" }));
    proxy.partition(true);
    await until("the last confirmation to be older than the lease minus the margin", () => ageOf(bot, run) > leaseMs - marginMs);
    await assertRefused(run, 2, (error) => error instanceof SelfFenced && /could not confirm/.test(error.message));
    assert.ok(ageOf(bot, run) < leaseMs, "refused while the lease might still have been ours");
    // Not left for the next test's claim to find once its lease ran out.
    await suite.client.finish(run.runId, { generation: run.generation });
  } finally {
    await bot.stop();
    await proxy.close();
  }
});

test("a run whose lease ran out and was claimed by another bot is refused, and its writes are fenced", async () => {
  const bot = new Bot(suite.client, { slot: "late-" + randomUUID(), leaseMs, selfFenceMarginMs: marginMs, heartbeatIntervalMs: 3_600_000 });
  try {
    const run = await claimed(bot);
    await intentOf(run, 1);
    // Another slot claims the run once its lease has expired.
    const other = randomUUID();
    const taken = await until("another slot to take the expired run", async () => (await suite.client.claim({ slot: "thief", incarnation: other })).find((c) => c.runId === run.runId));
    assert.equal(taken.reclaimed, true);
    await assertRefused(run, 1, (error) => error instanceof SelfFenced && /reported it lost/.test(error.message));
    assert.equal(run.lost, true);
    assert.ok(run.signal.reason instanceof Fenced);
    await assert.rejects(run.append("user", "late"), Fenced);
    await assert.rejects(suite.client.append(run.runId, { generation: run.generation, kind: "user", body: "late", expectedSeq: 1 }), Fenced);
    await suite.client.finish(run.runId, { generation: taken.generation });
  } finally {
    await bot.stop();
  }
});

test("a superseded incarnation loses its runs at the next heartbeat and starts no tool", async () => {
  const slot = "old-" + randomUUID();
  const bot = new Bot(suite.client, { slot, leaseMs, selfFenceMarginMs: marginMs, heartbeatIntervalMs: 100 });
  try {
    const run = await claimed(bot);
    await intentOf(run, 1);
    const [taken] = await suite.client.claim({ slot, incarnation: randomUUID() });
    assert.equal(taken?.runId, run.runId);
    await until("the heartbeat to report the incarnation superseded", () => run.lost);
    assert.ok(run.signal.reason instanceof Superseded);
    assert.equal(bot.heartbeats.superseded, true);
    await assertRefused(run, 1, (error) => error instanceof Superseded);
    await assert.rejects(bot.next(), Superseded);
    await suite.client.finish(run.runId, { generation: taken!.generation });
  } finally {
    await bot.stop();
  }
});
