"""The Run helper's loop against the real server: claim, turn with intents, tools, completions,
finish; a takeover settled by the next incarnation; the transcript's reads."""

import json
import uuid

import harness
from runledger_client import RAW_APPEND_BYTES, Incarnation, Intent


class RunLoopTest(harness.ServerTest):
    def incarnation(self, client, slot=None):
        incarnation = Incarnation(client, slot or f"s-{uuid.uuid4().hex[:8]}")
        incarnation.start()
        self.addCleanup(incarnation.close)
        return incarnation

    def test_dispatch_is_created_once_per_key(self):
        client = self.client()
        first = client.dispatch("once", "t-once", "py-tests", input={"task": "x"},
                                profile={"p": 1}, system_prompt=b"\x00bytes")
        again = client.dispatch("once", "t-once", "py-tests", input={"task": "x"})
        self.assertTrue(first["created"])
        self.assertFalse(again["created"])
        self.assertEqual(again["run_id"], first["run_id"])
        self.assertEqual(first["input"], {"task": "x"})
        listed = list(client.iter_runs(thread_key="t-once", limit=1))
        self.assertEqual([r["run_id"] for r in listed], [first["run_id"]])

    def test_the_loop_claim_turn_tools_completions_finish(self):
        client = self.client()
        run_id = self.dispatch(client, input={"question": "2+2"})
        with self.incarnation(client) as incarnation:
            [run] = incarnation.claim()
            with run:
                self.assertEqual(run.run_id, run_id)
                self.assertIsNone(run.resume())  # a fresh claim: nothing to settle
                self.assertEqual(run.input, {"question": "2+2"})
                run.append("user", "what is 2+2?")
                steps = run.turn({"text": "let me compute"},
                                 [Intent("read_notes", "c1", {"n": 1}),
                                  Intent("add", "c2", {"a": 2, "b": 2})])
                self.assertEqual([s.effect_key for s in steps], [f"{run_id}/1", f"{run_id}/2"])
                tools = {"read_notes": lambda s: b"notes\xff",
                         "add": lambda s: s.args["a"] + s.args["b"]}
                done = [run.execute(s, tools[s.tool]) for s in steps]
                self.assertEqual([d["state"] for d in done], ["done", "done"])
                self.assertEqual([d["result_seq"] for d in done], [3, 4])
                [quiet] = run.turn("a tool without a result", [Intent("touch", "c0", {})])
                self.assertEqual(run.execute(quiet, lambda s: None)["result_bytes"], 0)
                # A tool's exception is its step's error outcome.
                [failing] = run.turn("again", [Intent("add", "c4", {})])
                self.assertEqual(run.execute(failing, tools["add"])["state"], "failed")
                finished = run.finish({"answer": 4})
            self.assertEqual(finished["status"], "finished")
            self.assertFalse(incarnation.holds(run_id))
        entries = list(client.entries(run_id))
        self.assertEqual([e.kind for e in entries],
                         ["user", "assistant", "tool_result", "tool_result", "assistant",
                          "tool_result", "assistant", "tool_result"])
        result = entries[3].json()
        self.assertEqual((result["call_id"], result["text"], result["is_error"]), ("c2", "4", False))
        self.assertEqual(entries[2].json()["text"], "notes\ufffd")
        self.assertEqual(entries[5].json()["text"], "")
        self.assertTrue(entries[7].json()["is_error"])
        self.assertEqual(client.verify(run_id), {"ok": True, "entries": 8})
        self.assertEqual(client.get_run(run_id)["steps"], 4)

    def test_the_next_incarnation_settles_what_the_last_left_in_flight(self):
        client = self.client()
        slot = f"s-{uuid.uuid4().hex[:8]}"
        run_id = self.dispatch(client)
        first = Incarnation(client, slot)
        [run] = first.claim()
        steps = run.turn("calls", [Intent("read_file", "c1", {"path": "a"}),
                                   Intent("bash", "c2", {"cmd": "deploy"}),
                                   Intent("write_file", "c3", {"path": "b"})])
        run.execute(steps[0], lambda s: "contents")
        # The process dies here, with c2 (unsafe) and c3 (idempotent) in flight.
        second = self.incarnation(client, slot)
        [again] = second.claim()
        self.assertEqual((again.run_id, again.reclaimed), (run_id, True))
        self.assertEqual(again.generation, run.generation + 1)
        settlement = again.resume()
        self.assertFalse(settlement.interrupted)
        self.assertEqual([(s["step_no"], s["rule"]) for s in settlement.settled],
                         [(2, "synthetic_unsafe")])
        self.assertEqual([(s.step_no, s.call_id, s.effect_key) for s in settlement.rerun],
                         [(3, "c3", f"{run_id}/3")])
        for step in settlement.rerun:
            again.execute(step, lambda s: {"written": True})
        self.assertEqual(again.next_seq, 5)  # turn, c1's result, c2's synthetic one, c3's
        [step] = again.turn("after the restart", [Intent("read_file", "c4", {})])
        self.assertEqual(step.step_no, 4)
        again.execute(step, lambda s: "ok")
        again.finish()
        states = [(s["call_id"], s["state"]) for s in client.steps(run_id)]
        self.assertEqual(states, [("c1", "done"), ("c2", "settled"), ("c3", "done"),
                                  ("c4", "done")])
        synthetic = client.entry(run_id, client.steps(run_id)[1]["result_seq"]).json()
        self.assertTrue(synthetic["synthetic"])
        self.assertTrue(client.verify(run_id)["ok"])

    def test_large_entries_go_raw_and_pages_follow_next(self):
        client = self.client()
        run_id = self.dispatch(client)
        [run] = self.incarnation(client).claim()
        big = bytes(range(256)) * (RAW_APPEND_BYTES // 256 + 17)
        self.assertEqual(run.append("user", big)["seq"], 1)
        for i in range(4):
            run.append("assistant", {"i": i})
        fetched = client.entry(run_id, 1)
        self.assertEqual((fetched.body, fetched.kind, fetched.generation),
                         (big, "user", run.generation))
        page = client.read(run_id, from_seq=2, limit=2)
        self.assertEqual([e.seq for e in page["entries"]], [2, 3])
        self.assertEqual(page["next"], 4)
        self.assertEqual([json.loads(e.body)["i"] for e in client.entries(run_id, from_seq=2)],
                         [0, 1, 2, 3])
        self.assertEqual(client.verify(run_id)["entries"], 5)
        run.release()
        self.assertEqual(client.get_run(run_id)["status"], "queued")


if __name__ == "__main__":
    import unittest

    unittest.main()
