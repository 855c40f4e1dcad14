#!/usr/bin/env python3
"""A scripted bot on the Python client: no model, each turn's tool calls come from the run's
profile, like the reference bot's script (bot/bot.h):

    {"script": {"turns": [{"text": "...",
                           "calls": [{"id": "c1", "tool": "effect", "args": {"ms": 20},
                                      "if_restarted": [{"id": "c1-check", "tool": "read_file",
                                                        "args": {"path": "notes"}}]}]}],
                "result": {"done": true}}}

Each turn is one write (the assistant entry with the intents of its calls); then each call runs
behind the self-fence and is completed with its tool_result entry. After a takeover the run is
settled first: pure and idempotent calls in flight are re-run; an unsafe one gets the server's
synthetic result, and the next turn is that call's ``if_restarted`` calls (a model re-checking,
as the synthetic result asks). Then the script goes on; after its last turn a final assistant
entry, and the run is finished with ``result``.

Tools: ``read_file`` (pure) and ``write_file`` (idempotent) on files under --work-dir/<run id>;
``effect`` (unsafe) appends its effect key to the effects log *before* acting (sleeping
``args.ms``), so a key logged twice is an effect done twice. Start the server with effect classes
``pure: read_*`` and ``idempotent: write_*``.

Crashes on purpose: RUNLEDGER_BOT_CRASH="after_intent:3,after_effect:1" makes the process
SIGKILL itself at the 3rd time a turn's intents are recorded, or the 1st time an effect was
logged (points: after_intent, after_effect, after_completion; each counted in this process).

    bot.py --url URL --slot py-1 --effects-log effects.log --work-dir DIR   (token: RUNLEDGER_TOKEN)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from runledger_client import (  # noqa: E402
    BudgetExhausted,
    Client,
    Fenced,
    Incarnation,
    Intent,
    Run,
    Step,
    Superseded,
)

log = logging.getLogger("bot")

CRASH_POINTS = ("after_intent", "after_effect", "after_completion")


class Crashes:
    """RUNLEDGER_BOT_CRASH: at which hit of which point this process kills itself."""

    def __init__(self, spec: str) -> None:
        self.at: Dict[str, int] = {}
        self.hits: Dict[str, int] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            point, _, count = item.partition(":")
            if point not in CRASH_POINTS or not count.isdigit() or int(count) < 1:
                raise SystemExit(f"RUNLEDGER_BOT_CRASH: {item!r}: expected POINT:N, POINT one of "
                                 f"{', '.join(CRASH_POINTS)}")
            self.at[point] = int(count)

    def hit(self, point: str) -> None:
        self.hits[point] = self.hits.get(point, 0) + 1
        if self.at.get(point) == self.hits[point]:
            log.warning("crashing at %s (hit %d)", point, self.hits[point])
            os.kill(os.getpid(), signal.SIGKILL)


class Tools:
    def __init__(self, work_dir: Path, effects_log: Path, crashes: Crashes) -> None:
        self.work_dir = work_dir
        self.effects_log = effects_log
        self.crashes = crashes

    def _path(self, step: Step, run: Run) -> Path:
        name = str(step.args.get("path", "notes"))
        if "/" in name or name.startswith("."):
            raise ValueError(f"path {name!r}: a plain file name")
        folder = self.work_dir / run.run_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def run(self, run: Run, step: Step) -> Any:
        time.sleep(float(step.args.get("ms", 0)) / 1000)
        if step.tool == "read_file":
            path = self._path(step, run)
            return path.read_text() if path.exists() else ""
        if step.tool == "write_file":
            path = self._path(step, run)
            scratch = path.with_suffix(".tmp")
            scratch.write_text(str(step.args.get("content", "")))
            scratch.replace(path)  # whole or not at all: safe to repeat
            return {"written": len(str(step.args.get("content", "")))}
        if step.tool == "effect":
            # Logged before acting: had the effect run twice, its key would be here twice.
            with open(self.effects_log, "a") as out:
                out.write(f"{step.effect_key} {step.tool} {run.generation}\n")
            self.crashes.hit("after_effect")
            time.sleep(float(step.args.get("act_ms", 0)) / 1000)
            return {"did": step.args.get("what", step.call_id)}
        raise ValueError(f"no tool {step.tool!r}")


def decide(run: Run, turns: List[Any]) -> Dict[str, Any]:
    """Where the script stands, from the record alone (a successor decides the same): the next
    script turn, or the re-checks of the last turn's calls whose results came back synthetic."""
    last: Optional[Dict[str, Any]] = None
    for entry in run.entries():
        if entry.kind == "assistant":
            last = entry.json()
    if last is None:
        return {"turn": 0, "recheck": False, "calls": None, "final": False}
    if last.get("final"):
        return {"turn": len(turns), "recheck": False, "calls": None, "final": True}
    turn = last["script_turn"]
    if not last.get("recheck"):
        synthetic = {s["call_id"] for s in run.steps() if s["state"] == "settled"}
        rechecks = [
            again
            for call in turns[turn].get("calls", [])
            if call["id"] in synthetic
            for again in call.get("if_restarted", [])
        ]
        if rechecks:
            return {"turn": turn, "recheck": True, "calls": rechecks, "final": False}
    return {"turn": turn + 1, "recheck": False, "calls": None, "final": False}


def drive(run: Run, tools: Tools, crashes: Crashes) -> None:
    settlement = run.resume()
    if settlement is not None:
        log.info("run %s reclaimed (generation %d): settled %d, rerun %d%s", run.run_id,
                 run.generation, len(settlement.settled), len(settlement.rerun),
                 ", interrupted" if settlement.interrupted else "")
        if settlement.interrupted:
            return
        for step in settlement.rerun:
            run.execute(step, lambda s: tools.run(run, s))
    script = (run.profile or {}).get("script") or {}
    turns = script.get("turns")
    if not isinstance(turns, list):
        run.finish({"error": "the run's profile has no script"}, status="failed")
        return
    at = decide(run, turns)
    while True:
        if at["final"] or at["turn"] >= len(turns):
            if not at["final"]:
                run.append("assistant", {"final": True, "text": "The work is done."})
            run.finish(script.get("result"))
            log.info("run %s finished", run.run_id)
            return
        calls = at["calls"] if at["recheck"] else turns[at["turn"]].get("calls", [])
        text = ("The process restarted; re-checking before going on." if at["recheck"]
                else turns[at["turn"]].get("text", ""))
        body = {
            "script_turn": at["turn"],
            "recheck": at["recheck"],
            "text": text,
            "calls": [{"id": c["id"], "tool": c["tool"], "args": c.get("args", {})}
                      for c in calls],
        }
        steps = run.turn(body, [Intent(c["tool"], c["id"], c.get("args", {})) for c in calls])
        crashes.hit("after_intent")
        for step in steps:
            run.execute(step, lambda s: tools.run(run, s))
            crashes.hit("after_completion")
        at = {"turn": at["turn"] + 1, "recheck": False, "calls": None, "final": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("RUNLEDGER_API_URL"),
                        help="the server (default: $RUNLEDGER_API_URL)")
    parser.add_argument("--slot", required=True)
    parser.add_argument("--effects-log", default=os.environ.get("RUNLEDGER_EFFECTS_LOG"),
                        help="where the unsafe tool logs effect keys ($RUNLEDGER_EFFECTS_LOG)")
    parser.add_argument("--work-dir", default=".", help="the file tools' folder")
    parser.add_argument("--wait-ms", type=int, default=5000, help="a claim's long-poll")
    args = parser.parse_args()
    if not args.url or not args.effects_log:
        parser.error("--url and --effects-log (or their environment variables) are required")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s [{args.slot} pid {os.getpid()}] %(levelname)s %(message)s")
    crashes = Crashes(os.environ.get("RUNLEDGER_BOT_CRASH", ""))
    tools = Tools(Path(args.work_dir), Path(args.effects_log), crashes)
    client = Client(args.url, os.environ.get("RUNLEDGER_TOKEN"))
    with Incarnation(client, args.slot) as bot:
        log.info("started as incarnation %s", bot.id)
        try:
            for run in bot.runs(wait_ms=args.wait_ms):
                with run:
                    try:
                        drive(run, tools, crashes)
                    except Fenced as e:  # LeaseLost too: the run is someone else's now
                        log.warning("run %s: %s; leaving it", run.run_id, e)
                    except BudgetExhausted as e:
                        log.warning("run %s: %s", run.run_id, e)
        except Superseded as e:
            log.warning("%s; exiting", e)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
