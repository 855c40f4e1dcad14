"""Heartbeats (one batched call per incarnation, lost runs noted) and the self-fence, against a
server with a 1.5 s lease."""

import datetime
import uuid

import harness
from runledger_client import Incarnation, Intent, LeaseLost, RetryPolicy
from runledger_client.incarnation import parse_time

LEASE_S = 1.5


class LeaseTest(harness.ServerTest):
    lease_ms = int(LEASE_S * 1000)

    def incarnation(self, client=None, **kwargs):
        incarnation = Incarnation(client or self.client(), f"s-{uuid.uuid4().hex[:8]}", **kwargs)
        self.addCleanup(incarnation.close)
        return incarnation

    def claim(self, incarnation, n=1):
        client = incarnation.client
        wanted = {self.dispatch(client) for _ in range(n)}
        runs = incarnation.claim(max=n)
        self.assertEqual({r.run_id for r in runs}, wanted)
        return runs

    def test_the_lease_is_learned_from_the_first_claim(self):
        incarnation = self.incarnation()
        self.assertIsNone(incarnation.lease_s)
        self.claim(incarnation)
        self.assertAlmostEqual(incarnation.lease_s, LEASE_S, places=3)
        self.assertAlmostEqual(incarnation.heartbeat_every_s, LEASE_S / 3, places=3)

    def test_one_heartbeat_call_keeps_every_run_of_the_incarnation(self):
        incarnation = self.incarnation()
        runs = self.claim(incarnation, 3)
        client = incarnation.client
        claimed_until = {r.run_id: parse_time(r.info["lease_expires_at"]) for r in runs}
        before = len(self.server.log_lines("leases.heartbeat"))
        incarnation.start()
        # Four beats: past twice the lease, which only the heartbeats can have kept.
        harness.wait_until(lambda: incarnation.heartbeat_calls >= 4, 10, "four heartbeats")
        for run in runs:
            now = client.get_run(run.run_id)
            self.assertEqual(now["status"], "running")
            self.assertEqual(now["generation"], run.generation)
            self.assertGreater(parse_time(now["lease_expires_at"]),
                               claimed_until[run.run_id] + datetime.timedelta(seconds=LEASE_S))
            self.assertFalse(run.lost)
        incarnation.close()
        calls = incarnation.heartbeat_calls
        # The server saw one request per beat, not one per run (its log line may follow the
        # answer by a moment).
        beats_logged = lambda: len(self.server.log_lines("leases.heartbeat")) - before
        harness.wait_until(lambda: beats_logged() >= calls, 10, "the heartbeats' log lines")
        self.assertEqual(beats_logged(), calls)
        for run in runs:
            run.finish()

    def test_a_run_reported_lost_is_refused_a_tool_without_asking_again(self):
        incarnation = self.incarnation()
        kept, released = self.claim(incarnation, 2)
        client = incarnation.client
        client.release(released.run_id, released.generation)  # behind the Run's back
        self.assertEqual(incarnation.heartbeat_now(), [released.run_id])
        self.assertTrue(released.lost)
        self.assertFalse(kept.lost)
        calls = incarnation.heartbeat_calls
        with self.assertRaises(LeaseLost):
            released.start_tool()
        self.assertEqual(incarnation.heartbeat_calls, calls)  # known lost: no re-check
        kept.start_tool()
        kept.finish()

    def test_a_stale_lease_is_rechecked_before_a_tool_and_then_allowed(self):
        incarnation = self.incarnation()  # not started: no heartbeat thread
        [run] = self.claim(incarnation)
        threshold = incarnation.lease_s - incarnation.safety_margin_s
        harness.wait_until(lambda: incarnation.lease_age_s(run.run_id) > threshold, 10,
                           "the lease to be older than the lease minus the margin")
        calls = incarnation.heartbeat_calls
        ran = []
        [step] = run.turn("turn", [Intent("bash", "c1", {})])
        run.execute(step, lambda s: ran.append(s.step_no) or "ok")
        self.assertEqual(ran, [1])
        self.assertEqual(incarnation.heartbeat_calls, calls + 1)  # the synchronous re-check
        self.assertLess(incarnation.lease_age_s(run.run_id), threshold)
        run.finish()

    def test_a_stale_lease_that_cannot_be_rechecked_refuses_the_tool(self):
        relay = harness.Relay(self.server.port)
        self.addCleanup(relay.close)
        client = self.client(relay.url, retry=RetryPolicy(attempts=2, base_s=0.01))
        incarnation = self.incarnation(client)
        [run] = self.claim(incarnation)
        [step] = run.turn("turn", [Intent("bash", "c1", {})])
        threshold = incarnation.lease_s - incarnation.safety_margin_s
        harness.wait_until(lambda: incarnation.lease_age_s(run.run_id) > threshold, 10,
                           "the lease to be older than the lease minus the margin")
        relay.cut()  # the server can no longer be reached
        ran = []
        with self.assertRaises(LeaseLost):
            run.execute(step, lambda s: ran.append(s.step_no))
        self.assertEqual(ran, [])
        self.assertEqual(self.client().steps(run.run_id)[0]["state"], "intent")

    def test_a_superseded_incarnation_refuses_every_tool(self):
        client = self.client()
        incarnation = self.incarnation(client)
        [run] = self.claim(incarnation)
        [step] = run.turn("turn", [Intent("bash", "c1", {})])
        incarnation.start()
        successor = Incarnation(client, incarnation.slot)
        [taken] = successor.claim()
        self.assertEqual(taken.run_id, run.run_id)
        harness.wait_until(lambda: incarnation.superseded, 10, "the heartbeat to be superseded")
        self.assertTrue(run.lost)
        with self.assertRaises(LeaseLost):
            run.execute(step, lambda s: self.fail("the tool ran"))
        taken.finish()


if __name__ == "__main__":
    import unittest

    unittest.main()
