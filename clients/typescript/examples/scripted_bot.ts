// A scripted bot on the client: no model, each turn's calls come from the run's profile (like the
// reference bot's script), so a run can be killed at any point and replayed.
//
//   RUNLEDGER_API_URL=http://127.0.0.1:8080 RUNLEDGER_TOKEN=... BOT_SLOT=ts-1 \
//   BOT_EFFECTS=/tmp/effects.log node dist/examples/scripted_bot.js
//
// The profile: {"script": {"turns": [{"text": "...", "calls": [{"id": "c1", "tool": "effect",
//   "args": {"ms": 20}}]}, ...], "result": {...}}}. Every turn needs at least one call. Tools:
//   effect      unsafe: appends the step's effect key to BOT_EFFECTS, then acts (sleeps args.ms)
//   read_*      pure: answers its args
//   write_*     idempotent: answers its args
// Failpoints, in the C++ format (failpoint/failpoint.h), kill the process with SIGKILL:
//   RUNLEDGER_FAILPOINTS="bot.after_intent=kill@2,bot.after_effect=kill"
// bot.after_intent fires right after a turn's intents are written, bot.after_effect right after
// an effect key is logged, bot.after_completion right after a step is completed.
// With BOT_EXIT_WHEN_IDLE=1 the bot exits 0 once a claim finds nothing within BOT_WAIT_MS.
// It prints a JSON line per claim and per finished run.
import { appendFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Bot, Client, Fenced, type Intent, type Json, type Run, type Step } from "../src/index.js";

interface Call {
  id: string;
  tool: string;
  args?: { [key: string]: Json };
}

interface Script {
  turns: { text: string; calls: Call[] }[];
  result?: Json;
}

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
}

// name -> the hit that kills (1-based).
const failpoints = new Map<string, number>();
for (const spec of (process.env["RUNLEDGER_FAILPOINTS"] ?? "").split(",").filter(Boolean)) {
  const match = /^([\w.]+)=kill(?:@(\d+))?$/.exec(spec.trim());
  if (!match) throw new Error(`RUNLEDGER_FAILPOINTS: cannot read "${spec}" (name=kill or name=kill@N)`);
  failpoints.set(match[1]!, Number(match[2] ?? 1));
}
const hits = new Map<string, number>();

function hit(name: string): void {
  const nth = failpoints.get(name);
  if (nth === undefined) return;
  const count = (hits.get(name) ?? 0) + 1;
  hits.set(name, count);
  if (count >= nth) process.kill(process.pid, "SIGKILL");
}

function log(event: { [key: string]: Json }): void {
  process.stdout.write(JSON.stringify(event) + "\n");
}

const effects = env("BOT_EFFECTS");

async function runTool(run: Run, step: { stepNo: number; tool: string; callId: string; args: { [key: string]: Json }; effectKey: string }): Promise<Step> {
  const done = await run.callTool(step.stepNo, async () => {
    if (step.tool === "effect") {
      // Logged before acting: a crash after this line must never lead to a second effect.
      appendFileSync(effects, step.effectKey + "\n");
      hit("bot.after_effect");
      await sleep(Number(step.args["ms"] ?? 0));
    } else if (!step.tool.startsWith("read_") && !step.tool.startsWith("write_")) {
      return { error: `unknown tool ${step.tool}` };
    }
    const toolResult = { type: "tool_result", call_id: step.callId, tool: step.tool, effect_key: step.effectKey, text: "ok" };
    return { result: { tool: step.tool, args: step.args }, toolResult: JSON.stringify(toolResult) };
  });
  hit("bot.after_completion");
  return done;
}

/** Drives the run from wherever its record says it is to its finish. */
async function drive(run: Run): Promise<void> {
  const script = (run.record.profile as { script?: Script } | null)?.script;
  if (!script) {
    await run.fail({ error: "the run's profile has no script" });
    return;
  }
  const steps = new Map((await run.steps()).map((s) => [s.stepNo, s]));
  let next = 1;
  for (const turn of script.turns) {
    const intents: Intent[] = turn.calls.map((call, i) => ({ stepNo: next + i, tool: call.tool, callId: call.id, args: call.args ?? {} }));
    next += intents.length;
    if (!steps.has(intents[0]!.stepNo)) {
      // The turn and its intents are one write: either all of its steps exist or none.
      const written = await run.turn(JSON.stringify({ role: "assistant", text: turn.text, calls: turn.calls }), intents);
      hit("bot.after_intent");
      intents.forEach((intent, i) =>
        steps.set(intent.stepNo, { ...intent, args: intent.args ?? {}, state: "intent", effectKey: written.effectKeys[i]! } as Step),
      );
    }
    for (const intent of intents) {
      const step = steps.get(intent.stepNo)!;
      // In flight: ours from this turn, or a pure/idempotent call settlement handed back.
      if (step.state === "intent") steps.set(intent.stepNo, await runTool(run, step));
    }
  }
  await run.finish(script.result ?? null);
}

async function main(): Promise<void> {
  const client = new Client({ baseUrl: env("RUNLEDGER_API_URL"), token: env("RUNLEDGER_TOKEN") });
  const bot = new Bot(client, { slot: env("BOT_SLOT") });
  const waitMs = Number(process.env["BOT_WAIT_MS"] ?? 5_000);
  for (;;) {
    const run = await bot.next({ waitMs });
    if (!run) {
      if (process.env["BOT_EXIT_WHEN_IDLE"] === "1") break;
      continue;
    }
    log({
      event: "claimed",
      run_id: run.runId,
      generation: run.generation,
      reclaimed: run.reclaimed,
      incarnation: bot.incarnation,
      settled: run.settlement?.settled.map((s) => s.stepNo) ?? [],
      rerun: run.settlement?.rerun.map((s) => s.stepNo) ?? [],
    });
    try {
      await drive(run);
    } catch (error) {
      // Fenced: the run is no longer ours; whoever holds it now drives it. Anything else ends us.
      if (!(error instanceof Fenced)) throw error;
      log({ event: "fenced", run_id: run.runId, message: error.message });
      continue;
    }
    log({ event: "finished", run_id: run.runId });
  }
  await bot.stop();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
