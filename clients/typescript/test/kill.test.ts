// The scripted bot (examples/scripted_bot.ts) as a real process, killed with SIGKILL right after
// an intent, right after an effect and at random moments; each restart is a new incarnation of the
// same slot, which takes the run over at once, settles it and finishes it. Afterwards: every run
// finished, no effect key twice, every transcript verifies, each step's tool result is its own.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { type Json } from "../src/index.js";
import { until } from "./support/server.js";
import { serverForTests } from "./support/suite.js";

const botPath = fileURLToPath(new URL("../examples/scripted_bot.js", import.meta.url));
const leaseMs = 30_000; // a restart never waits for it: the new incarnation takes over at once
const suite = serverForTests({ leaseMs, effectClasses: "pure: read_*\nidempotent: write_*\n" });

interface BotEvent {
  event: string;
  at: number; // when the test read it
  run_id: string;
  reclaimed?: boolean;
  settled?: number[];
  rerun?: number[];
}

interface BotProcess {
  events: BotEvent[];
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  exited: boolean;
  kill: () => void;
  stderr: () => string;
  startedAt: number;
}

function startBot(effects: string, failpoints: string, extra: NodeJS.ProcessEnv = {}): BotProcess {
  const child = spawn(process.execPath, [botPath], {
    env: {
      ...process.env,
      RUNLEDGER_API_URL: suite.server.baseUrl,
      RUNLEDGER_TOKEN: suite.server.token,
      BOT_SLOT: "ts-kill",
      BOT_EFFECTS: effects,
      BOT_WAIT_MS: "1000",
      RUNLEDGER_FAILPOINTS: failpoints,
      ...extra,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const events: BotEvent[] = [];
  let partial = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => {
    partial += chunk;
    const lines = partial.split("\n");
    partial = lines.pop()!;
    for (const line of lines) if (line) events.push({ ...JSON.parse(line), at: Date.now() });
  });
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const bot: BotProcess = {
    events,
    // "close", not "exit": the bot's last lines are read by then.
    exit: new Promise((resolve) =>
      child.on("close", (code, signal) => {
        bot.exited = true;
        resolve({ code, signal });
      }),
    ),
    exited: false,
    kill: () => child.kill("SIGKILL"),
    stderr: () => stderr,
    startedAt: Date.now(),
  };
  return bot;
}

// Three turns, five steps: unsafe effects beside a pure and an idempotent call.
function script(n: number): Json {
  return {
    turns: [
      { text: "first", calls: [{ id: "c1", tool: "effect", args: { ms: 15 } }, { id: "c2", tool: "read_state", args: { n } }] },
      { text: "second", calls: [{ id: "c3", tool: "effect", args: { ms: 15 } }, { id: "c4", tool: "write_note", args: { n } }] },
      { text: "third", calls: [{ id: "c5", tool: "effect", args: { ms: 15 } }] },
    ],
    result: { run: n, done: true },
  };
}

const inProgress = (bot: BotProcess) => {
  const last = bot.events.at(-1);
  return last?.event === "claimed" ? last.run_id : undefined;
};

test("bots killed with SIGKILL mid-run: each restart takes the run over, settles and finishes it; no effect twice", async () => {
  const started = Date.now();
  const runs = 24;
  const ids: string[] = [];
  for (let n = 0; n < runs; n++) {
    const k = "kill-" + randomUUID();
    const { run } = await suite.client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "kill-test", profile: { script: script(n) } });
    ids.push(run.runId);
  }
  const effects = join(suite.server.root, "effects.log");
  writeFileSync(effects, "");
  // Each bot dies one way: by a failpoint at its Nth hit, or by a SIGKILL at a random moment.
  const deaths: string[] = [];
  for (let i = 0; deaths.length < 30; i++) {
    const nth = 1 + (i % 3);
    deaths.push(`bot.after_intent=kill@${nth}`, `bot.after_effect=kill@${nth}`, "random");
    if (i % 5 === 4) deaths.push(`bot.after_completion=kill@${nth}`);
  }
  const killedAfterEffect: string[] = [];
  let takeovers = 0;
  let previous: string | undefined; // the run the last killed bot was driving, if unfinished
  // The restarted bot's first claim is the killed bot's run, reclaimed, at once (not after the lease).
  const checkTakeover = (bot: BotProcess) => {
    if (!previous) return;
    const first = bot.events[0];
    assert.equal(first?.run_id, previous, "the restarted bot's first claim is the killed bot's run");
    assert.equal(first?.reclaimed, true);
    assert.ok(first!.at - bot.startedAt < leaseMs / 3, `taken over ${first!.at - bot.startedAt} ms after the start`);
    takeovers++;
  };
  for (const death of deaths) {
    // Idle, it exits 0 (and fails the test) rather than wait for work forever.
    const bot = startBot(effects, death === "random" ? "" : death, { BOT_EXIT_WHEN_IDLE: "1" });
    if (death === "random") {
      await until("the bot to claim a run", () => bot.events.length > 0 || bot.exited);
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 200));
      bot.kill();
    }
    const { code, signal } = await bot.exit;
    assert.equal(signal, "SIGKILL", `the bot died by SIGKILL (exit ${code}): ${bot.stderr()}`);
    checkTakeover(bot);
    if (death.startsWith("bot.after_effect")) {
      const lines = readFileSync(effects, "utf8").trim().split("\n");
      killedAfterEffect.push(lines.at(-1)!);
    }
    previous = inProgress(bot);
    if (death !== "random") assert.ok(previous, `${death} fired in the middle of a run`);
    // A random kill may come after the finish was written but before it was logged.
    if (previous && (await suite.client.run(previous)).status === "finished") previous = undefined;
  }
  const last = startBot(effects, "", { BOT_EXIT_WHEN_IDLE: "1" });
  const { code } = await last.exit;
  assert.equal(code, 0, `the last bot finishes everything and exits 0: ${last.stderr()}`);
  checkTakeover(last);

  // Every run finished with its script's result, its transcript intact, each step accounted for.
  const effectLines = readFileSync(effects, "utf8").trim().split("\n");
  assert.equal(new Set(effectLines).size, effectLines.length, "no effect key twice");
  let synthetic = 0;
  for (const [n, runId] of ids.entries()) {
    const run = await suite.client.run(runId);
    assert.equal(run.status, "finished", `run ${n}`);
    assert.deepEqual(run.result, { run: n, done: true });
    assert.deepEqual(await suite.client.verify(runId), { ok: true, entries: run.transcript.seq });
    const entries = new Map<number, { kind: string; body: Buffer }>();
    for await (const e of suite.client.entries(runId)) entries.set(e.seq, e);
    assert.equal([...entries.values()].filter((e) => e.kind === "assistant").length, 3, "one entry per turn");
    const steps = await suite.client.steps(runId);
    assert.deepEqual(steps.map((s) => s.callId), ["c1", "c2", "c3", "c4", "c5"]);
    for (const s of steps) {
      assert.ok(s.state === "done" || s.state === "settled", `${s.effectKey} is ${s.state}`);
      assert.ok(s.resultSeq !== null, `${s.effectKey} has its tool_result entry`);
      const result = entries.get(s.resultSeq!)!;
      assert.equal(result.kind, "tool_result");
      const body = JSON.parse(result.body.toString());
      assert.equal(body.call_id, s.callId, "the step's tool result is its own");
      if (body.synthetic) synthetic++;
      if (s.tool === "effect" && s.state === "done") {
        assert.ok(effectLines.includes(s.effectKey), `${s.effectKey} completed, so its effect was logged`);
      }
    }
  }
  for (const key of killedAfterEffect) {
    const [runId, stepNo] = [key.slice(0, key.lastIndexOf("/")), Number(key.slice(key.lastIndexOf("/") + 1))];
    const step = (await suite.client.steps(runId)).find((s) => s.stepNo === stepNo)!;
    assert.equal(step.state, "settled", `${key}: the effect was done, so it was settled with a synthetic result, not redone`);
  }
  assert.ok(synthetic >= killedAfterEffect.length);
  assert.ok(takeovers >= deaths.filter((d) => d !== "random").length, `every failpoint's run was taken over (${takeovers})`);
  console.log(`kill test: ${deaths.length} kills over ${runs} runs, ${takeovers} takeovers, ${synthetic} synthetic results, ${effectLines.length} effects, ${Date.now() - started} ms`);
});
