"""The kill test: real processes of examples/python/bot.py against a real server, killed with
SIGKILL at random moments and at the bot's failpoints (right after a turn's intents are recorded,
right after an effect was logged, right after a completion), each restarted as a new incarnation
of its slot. Afterwards every run is finished, no effect key is in the effects log twice, every
transcript verifies, and each run's tool results match its steps.

Runs are dispatched while the chaos goes on, so that it always finds work in flight. Profile
(environment): RUNLEDGER_PY_KILL_SEED (printed; replays the schedule), RUNLEDGER_PY_KILLS (30),
RUNLEDGER_PY_RUNS (20, the fewest dispatched). On failure the bots' logs are kept.
"""

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
from pathlib import Path

import harness
from runledger_client import Client, TERMINAL_STATUSES

BOT = harness.REPO / "examples" / "python" / "bot.py"
BOTS = 3
LEASE_MS = 3000
TURNS = 8
MOST_RUNS = 120
CRASH_POINTS = ("after_intent", "after_effect", "after_completion")


def script(index: int) -> dict:
    """TURNS turns cycling through the effect classes; every third turn has two calls."""
    turns = []
    for t in range(TURNS):
        tools = [["effect"], ["read_file"], ["write_file", "effect"]][t % 3]
        calls = []
        for n, tool in enumerate(tools):
            call = {"id": f"t{t}c{n}", "tool": tool, "args": {"ms": 15, "path": "notes"}}
            if tool == "write_file":
                call["args"]["content"] = f"run {index} turn {t}"
            if tool == "effect":
                call["args"].update(act_ms=15, what=f"effect of turn {t}")
                call["if_restarted"] = [{"id": f"t{t}c{n}-check", "tool": "read_file",
                                         "args": {"path": "notes"}}]
            calls.append(call)
        turns.append({"text": f"turn {t}", "calls": calls})
    return {"turns": turns, "result": {"done": True, "run": index}}


class Bot:
    def __init__(self, slot: str, work: Path) -> None:
        self.slot = slot
        self.work = work
        self.process = None
        self.logs = []
        self.killed_by_test = False

    def start(self, url: str, token: str, crash: str) -> None:
        log = self.work / "logs" / f"{self.slot}-{len(self.logs) + 1}.log"
        self.logs.append(log)
        env = dict(os.environ, RUNLEDGER_TOKEN=token, RUNLEDGER_BOT_CRASH=crash)
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(BOT), "--url", url, "--slot", self.slot,
                 "--effects-log", str(self.work / "effects.log"),
                 "--work-dir", str(self.work / "files"), "--wait-ms", "2000"],
                env=env, stdout=out, stderr=subprocess.STDOUT)
        self.killed_by_test = False

    def kill(self) -> None:
        self.killed_by_test = True
        self.process.send_signal(signal.SIGKILL)

    def crash_point(self) -> str:
        """The failpoint this incarnation's log says it crashed at ("" if none)."""
        for line in self.logs[-1].read_text(errors="replace").splitlines():
            if "crashing at " in line:
                return line.split("crashing at ", 1)[1].split()[0]
        return ""


class KillTest(unittest.TestCase):
    def test_bots_killed_at_random_and_at_failpoints_never_repeat_an_effect(self):
        seed = int(os.environ.get("RUNLEDGER_PY_KILL_SEED") or random.SystemRandom().randrange(2**31))
        kills_wanted = int(os.environ.get("RUNLEDGER_PY_KILLS", "30"))
        runs_wanted = int(os.environ.get("RUNLEDGER_PY_RUNS", "20"))
        print(f"kill test seed {seed} (replay with RUNLEDGER_PY_KILL_SEED={seed})", flush=True)
        rng = random.Random(seed)
        started = time.monotonic()

        server = harness.Server(lease_ms=LEASE_MS, extra_args=("--max-takeovers", "100"))
        work = Path(tempfile.mkdtemp(prefix="runledger-py-kill-"))
        (work / "logs").mkdir()
        keep = True
        try:
            token = server.token("kill-test")
            client = Client(server.url, token)
            run_ids = []

            def live() -> int:
                return int(server.sql(
                    "SELECT count(*) FROM live_runs WHERE status IN ('queued', 'running')"))

            def top_up() -> None:
                for _ in range(BOTS * 2 - live()):
                    if len(run_ids) >= MOST_RUNS:
                        return
                    key = f"kill-{len(run_ids)}"
                    run_ids.append(client.dispatch(
                        key, f"thread-{key}", "kill-test",
                        profile={"script": script(len(run_ids))})["run_id"])

            top_up()
            bots = [Bot(f"py-{i + 1}", work) for i in range(BOTS)]
            for bot in bots:
                bot.start(server.url, token, "")

            kills = collections.Counter()  # "random", or the failpoint
            armed = 0
            bad_exits = []

            def reap_and_restart(arm: bool) -> None:
                nonlocal armed
                for bot in bots:
                    code = bot.process.poll()
                    if code is None:
                        continue
                    if code == -signal.SIGKILL:
                        kills["random" if bot.killed_by_test else bot.crash_point() or "?"] += 1
                    else:
                        bad_exits.append((bot.logs[-1], code))
                    crash = ""
                    if arm and rng.random() < 0.6:
                        crash = f"{rng.choice(CRASH_POINTS)}:{rng.randint(1, 3)}"
                        armed += 1
                    bot.start(server.url, token, crash)

            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                done = (sum(kills.values()) >= kills_wanted and len(run_ids) >= runs_wanted
                        and kills["random"] >= 5 and kills["after_intent"] >= 2
                        and kills["after_effect"] >= 2)
                if done:
                    break
                time.sleep(rng.uniform(0.1, 0.4))  # the chaos's pace, not a synchronization
                top_up()
                reap_and_restart(arm=True)
                if rng.random() < 0.5:
                    victim = rng.choice(bots)
                    if victim.process.poll() is None:
                        victim.kill()
            chaos_s = time.monotonic() - started

            # Calm: every bot restarted unarmed; every run must finish.
            for bot in bots:
                if bot.process.poll() is None:
                    bot.kill()
                bot.process.wait()
            reap_and_restart(arm=False)
            over = "', '".join(TERMINAL_STATUSES)
            try:
                harness.wait_until(lambda: live() == 0 and int(server.sql(
                    f"SELECT count(*) FROM live_runs WHERE status IN ('{over}')")) == len(run_ids),
                    90, "every run to end")
            except AssertionError as e:
                print(f"kill test: {e}", flush=True)  # the checks below say which runs
            finals = {run_id: client.get_run(run_id)["status"] for run_id in run_ids}
            for bot in bots:
                bot.process.send_signal(signal.SIGTERM)
                bot.process.wait()

            # The checks.
            effects = collections.Counter(
                line.split()[0] for line in (work / "effects.log").read_text().splitlines())
            problems = []
            reclaimed = 0
            steps_total = 0
            for run_id in run_ids:
                if finals[run_id] != "finished":
                    problems.append(f"run {run_id}: {finals[run_id]}")
                    continue
                verified = client.verify(run_id)
                if not verified["ok"]:
                    problems.append(f"run {run_id}: the transcript does not verify: {verified}")
                steps = client.steps(run_id)
                steps_total += len(steps)
                problems += check_tool_results(run_id, steps, list(client.entries(run_id)),
                                               effects)
                reclaimed += client.get_run(run_id)["generation"] > 1
            twice = {k: n for k, n in effects.items() if n > 1}
            incarnations = [line for bot in bots for log in bot.logs
                            for line in log.read_text(errors="replace").splitlines()
                            if "started as incarnation " in line]
            distinct = {line.rsplit(" ", 1)[1] for line in incarnations}
            print(f"kill test: seed {seed}, {len(run_ids)} runs ({reclaimed} taken over at least "
                  f"once), {steps_total} steps, {len(effects)} effects, kills "
                  f"{sum(kills.values())} {dict(kills)}, {armed} armed restarts, "
                  f"{len(distinct)} incarnations, chaos {chaos_s:.1f} s, total "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            self.assertEqual(bad_exits, [])
            self.assertEqual(twice, {}, "effect keys logged twice")
            self.assertEqual(problems, [])
            self.assertGreaterEqual(len(run_ids), runs_wanted)
            self.assertGreaterEqual(sum(kills.values()), kills_wanted)
            self.assertGreaterEqual(kills["random"], 5)
            self.assertGreaterEqual(kills["after_intent"], 2)
            self.assertGreaterEqual(kills["after_effect"], 2)
            self.assertGreater(reclaimed, 0)
            self.assertEqual(len(distinct), len(incarnations))  # a new incarnation each start
            keep = False
        finally:
            if keep:
                print(f"kill test: failed; the bots' logs are kept in {work}", flush=True)
            else:
                shutil.rmtree(work)
            server.stop()


def check_tool_results(run_id, steps, entries, effects) -> list:
    """Each step has exactly one tool_result entry, naming it; a synthetic one only for an unsafe
    call settled after a crash; a real effect's key logged exactly once; the turns' calls are the
    steps, in order; the script ran to its final entry."""
    problems = []
    by_seq = {e.seq: e for e in entries}
    results = {e.seq for e in entries if e.kind == "tool_result"}
    linked = set()
    for s in steps:
        where = f"run {run_id} step {s['step_no']} ({s['call_id']}, {s['tool']})"
        entry = by_seq.get(s["result_seq"])
        if s["state"] not in ("done", "settled") or entry is None or entry.kind != "tool_result":
            problems.append(f"{where}: state {s['state']}, result_seq {s['result_seq']}")
            continue
        linked.add(entry.seq)
        body = entry.json()
        if (body["call_id"], body["tool"], body["effect_key"]) != (
                s["call_id"], s["tool"], s["effect_key"]):
            problems.append(f"{where}: its tool_result names {body}")
        synthetic = s["state"] == "settled"
        if body.get("synthetic", False) != synthetic:
            problems.append(f"{where}: synthetic {body.get('synthetic')} for state {s['state']}")
        if synthetic and (s["effect_class"] != "unsafe" or
                          s["settlement"]["rule"] != "synthetic_unsafe"):
            problems.append(f"{where}: settled as {s['settlement']}")
        if s["tool"] == "effect" and not synthetic and effects[s["effect_key"]] != 1:
            problems.append(f"{where}: completed, its key logged {effects[s['effect_key']]} times")
        if not synthetic and s["result_bytes"] is not None and s["tool"] == "effect":
            expected = json.dumps({"did": s["args"]["what"]}, separators=(",", ":"))
            if body["text"] != expected:
                problems.append(f"{where}: text {body['text']!r}, expected {expected!r}")
    if results != linked:
        problems.append(f"run {run_id}: tool_result entries {sorted(results - linked)} name no "
                        "step")
    turns = [e.json() for e in entries if e.kind == "assistant"]
    calls = [c["id"] for t in turns for c in t.get("calls", [])]
    if calls != [s["call_id"] for s in steps]:
        problems.append(f"run {run_id}: the turns' calls {calls} are not its steps")
    script_turns = sorted({t["script_turn"] for t in turns if not t.get("final")})
    if script_turns != list(range(TURNS)) or not turns[-1].get("final"):
        problems.append(f"run {run_id}: script turns {script_turns}, last {turns[-1:]}")
    return problems


if __name__ == "__main__":
    unittest.main()
