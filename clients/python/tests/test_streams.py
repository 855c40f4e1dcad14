"""Waiting for a run's end (`wait_ms`) and tailing its transcript (Server-Sent Events)."""

import threading
import time
import uuid

import harness
from runledger_client import Incarnation


class StreamTest(harness.ServerTest):
    def claimed(self, client):
        run_id = self.dispatch(client)
        incarnation = Incarnation(client, f"s-{uuid.uuid4().hex[:8]}")
        [run] = incarnation.claim()
        self.assertEqual(run.run_id, run_id)
        return run

    def test_wait_answers_at_the_terminal_write(self):
        client = self.client()
        run = self.claimed(client)
        waiter = self.client()
        outcome = {}

        def wait():
            started = time.monotonic()
            outcome["run"] = waiter.wait(run.run_id, timeout_s=20)
            outcome["took"] = time.monotonic() - started

        thread = threading.Thread(target=wait)
        thread.start()
        # The wait is in flight once the server holds its request (its log line comes at the
        # answer), i.e. when it has not answered within a moment; then the run ends.
        time.sleep(0.5)
        self.assertTrue(thread.is_alive())
        finished_at = time.monotonic()
        run.finish({"done": 1})
        thread.join()
        self.assertEqual(outcome["run"]["status"], "finished")
        self.assertLess(time.monotonic() - finished_at, 2.0)  # at the write, not the deadline
        self.assertLess(outcome["took"], 5.0)

    def test_wait_answers_the_current_state_at_the_deadline(self):
        client = self.client()
        run = self.claimed(client)
        started = time.monotonic()
        answered = client.wait(run.run_id, timeout_s=1.0)
        took = time.monotonic() - started
        self.assertEqual(answered["status"], "running")
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 5.0)
        self.assertEqual(client.get_run(run.run_id, wait_ms=0)["status"], "running")

    def test_tail_follows_entries_in_order_until_the_end(self):
        client = self.client()
        run = self.claimed(client)
        for i in range(3):
            run.append("user", f"before {i}")
        tail = self.client().tail(run.run_id)
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(tail))
        reader.start()
        harness.wait_until(lambda: len(seen) == 3, 20, "the existing entries")
        for i in range(3):
            run.append("assistant", f"after {i}")
        harness.wait_until(lambda: len(seen) == 6, 20, "the new entries")
        run.finish()
        reader.join(20)
        self.assertFalse(reader.is_alive())
        self.assertEqual([e.seq for e in seen], [1, 2, 3, 4, 5, 6])
        self.assertEqual([e.body for e in seen][2:4], [b"before 2", b"after 0"])
        self.assertEqual([e.kind for e in seen], ["user"] * 3 + ["assistant"] * 3)
        self.assertEqual(tail.end, {"run_id": run.run_id, "status": "finished"})
        self.assertEqual(tail.connections, 1)

    def test_tail_from_a_seq(self):
        client = self.client()
        run = self.claimed(client)
        for i in range(5):
            run.append("user", f"e{i}")
        run.finish()
        entries = list(client.tail(run.run_id, from_seq=4))
        self.assertEqual([e.body for e in entries], [b"e3", b"e4"])

    def test_a_tail_cut_mid_stream_resumes_with_last_event_id(self):
        relay = harness.Relay(self.server.port)
        self.addCleanup(relay.close)
        client = self.client()
        run = self.claimed(client)
        for i in range(4):
            run.append("user", f"e{i}")
        tail = self.client(relay.url).tail(run.run_id)
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(tail))
        reader.start()
        harness.wait_until(lambda: len(seen) == 4, 20, "the first entries")
        relay.close_all()  # the connection drops mid-stream
        for i in range(4, 8):
            run.append("user", f"e{i}")
        run.finish()
        reader.join(30)
        self.assertFalse(reader.is_alive())
        self.assertEqual([e.body for e in seen], [f"e{i}".encode() for i in range(8)])
        self.assertGreaterEqual(tail.connections, 2)
        self.assertEqual(tail.end["status"], "finished")

    def test_a_subscriber_that_leaves_early_closes_its_stream(self):
        client = self.client()
        run = self.claimed(client)
        for i in range(3):
            run.append("user", f"e{i}")
        relay = harness.Relay(self.server.port)
        self.addCleanup(relay.close)
        for entry in self.client(relay.url).tail(run.run_id):
            break  # leaves after the first entry
        self.assertEqual(entry.seq, 1)
        # The relay's connection to the server closes with the reader's.
        harness.wait_until(lambda: relay.open_connections == 0, 10, "the stream's connection to close")
        run.append("user", "still served")
        run.finish()


if __name__ == "__main__":
    import unittest

    unittest.main()
