"""The repeat rule against the real server: a 503 and a lost answer are repeated unchanged, and a
repeated write is answered as the first one, never written twice."""

import threading
import uuid

import harness
from runledger_client import AnswerLost, Incarnation, Intent, RetryPolicy

# Enough repeats to outlast a database cut of a second or two.
PATIENT = RetryPolicy(attempts=60, base_s=0.02, cap_s=0.2)


class UnavailableTest(harness.ServerTest):
    def through_a_cut(self, client, call, repeats):
        """`call()` on a thread while the database is cut, which ends once the client repeated
        `repeats` times after a 503; returns what `call` returned."""
        self.server.cut_database()
        outcome = {}

        def run():
            try:
                outcome["value"] = call()
            except Exception as e:  # reported below
                outcome["error"] = e

        thread = threading.Thread(target=run)
        thread.start()
        try:
            harness.wait_until(
                lambda: client.transport.stats.repeats_after_unavailable >= repeats, 20,
                f"{repeats} repeats after a 503")
        finally:
            self.server.restore_database()
        thread.join()
        self.assertNotIn("error", outcome)
        return outcome["value"]

    def test_a_503_is_repeated_until_the_database_is_back(self):
        client = self.client(retry=PATIENT)
        run_id = self.dispatch(client)
        run = self.through_a_cut(client, lambda: client.get_run(run_id), 2)
        self.assertEqual(run["run_id"], run_id)

    def test_a_write_repeated_through_503s_lands_once(self):
        client = self.client(retry=PATIENT)
        incarnation = Incarnation(client, f"s-{uuid.uuid4().hex[:8]}")
        run_id = self.dispatch(client)
        [run] = incarnation.claim()
        self.assertEqual(run.run_id, run_id)
        answer = self.through_a_cut(client, lambda: run.append("user", "through the cut"), 1)
        self.assertEqual(answer["seq"], 1)
        self.assertEqual([e.body for e in client.entries(run_id)], [b"through the cut"])
        run.finish()


class LostAnswerTest(harness.ServerTest):
    def setUp(self):
        self.relay = harness.Relay(self.server.port)
        self.addCleanup(self.relay.close)
        self.client_ = self.client(self.relay.url, retry=RetryPolicy(attempts=4, base_s=0.01))
        self.incarnation = Incarnation(self.client_, f"s-{uuid.uuid4().hex[:8]}")

    def claim(self):
        run_id = self.dispatch(self.client_)
        [run] = self.incarnation.claim()
        self.assertEqual(run.run_id, run_id)
        return run

    def assert_one_repeat(self):
        self.assertEqual(self.relay.dropped, 1)
        self.assertEqual(self.client_.transport.stats.repeats_after_lost_answer, 1)

    def test_a_lost_dispatch_answer_is_repeated_to_the_same_run(self):
        key = uuid.uuid4().hex
        self.relay.drop_next_answers(1)
        run = self.client_.dispatch(key, f"t-{key}", "py-tests")
        self.assert_one_repeat()
        self.assertFalse(run["created"])  # the repeat found the run the first try created
        self.assertEqual(len(self.client_.list_runs(thread_key=f"t-{key}")["runs"]), 1)

    def test_a_lost_append_answer_is_answered_the_first_answer(self):
        run = self.claim()
        run.append("user", "one")
        self.relay.drop_next_answers(1)
        answer = run.append("user", "two")
        self.assert_one_repeat()
        self.assertEqual(answer["seq"], 2)
        self.assertEqual([e.body for e in run.entries()], [b"one", b"two"])
        self.assertEqual(run.append("user", "three")["seq"], 3)
        self.assertTrue(self.client_.verify(run.run_id)["ok"])
        run.finish()

    def test_a_lost_turn_answer_writes_one_turn_and_its_intents(self):
        run = self.claim()
        self.relay.drop_next_answers(1)
        steps = run.turn({"text": "calling"}, [Intent("read_file", "c1", {"path": "a"}),
                                              Intent("bash", "c2", {"cmd": "ls"})])
        self.assert_one_repeat()
        self.assertEqual([s.step_no for s in steps], [1, 2])
        self.assertEqual([s.effect_key for s in steps], [f"{run.run_id}/1", f"{run.run_id}/2"])
        self.assertEqual(len(list(run.entries())), 1)
        self.assertEqual(len(run.steps()), 2)
        run.finish()

    def test_a_lost_completion_answer_writes_one_tool_result(self):
        run = self.claim()
        [step] = run.turn("turn", [Intent("bash", "c1", {})])
        self.relay.drop_next_answers(1)
        done = run.execute(step, lambda s: {"exit": 0})
        self.assert_one_repeat()
        self.assertEqual(done["state"], "done")
        self.assertEqual(done["result_seq"], 2)
        self.assertEqual([e.kind for e in run.entries()], ["assistant", "tool_result"])
        self.assertEqual(run.append("user", "next")["seq"], 3)
        run.finish()

    def test_a_lost_finish_answer_is_answered_the_finished_run(self):
        run = self.claim()
        self.relay.drop_next_answers(1)
        finished = run.finish({"ok": True})
        self.assert_one_repeat()
        self.assertEqual(finished["status"], "finished")
        self.assertEqual(finished["result"], {"ok": True})

    def test_an_append_without_expected_seq_is_not_repeated(self):
        run = self.claim()
        self.relay.drop_next_answers(1)
        with self.assertRaises(AnswerLost):
            self.client_.append(run.run_id, run.generation, "user", "once")
        self.assertEqual(self.client_.transport.stats.repeats_after_lost_answer, 0)
        # It did land: repeating it would have appended it twice.
        self.assertEqual([e.body for e in run.entries()], [b"once"])
        run.finish()

    def test_keep_alive_one_connection_and_a_new_one_after_a_close(self):
        client = self.client_
        for _ in range(5):
            client.list_runs(status="queued")
        self.assertEqual(self.relay.connections, 1)
        self.relay.close_all()  # as a server closing an idle keep-alive connection does
        client.list_runs(status="queued")
        self.assertEqual(self.relay.connections, 2)


if __name__ == "__main__":
    import unittest

    unittest.main()
