"""Each refusal of the real server arrives as its typed exception, with the envelope's fields."""

import socket
import uuid

import harness
from runledger_client import (
    AnswerLost,
    BudgetExhausted,
    Client,
    Conflict,
    Fenced,
    Forbidden,
    Incarnation,
    InvalidArgument,
    Malformed,
    NotFound,
    RetryPolicy,
    RunledgerError,
    Superseded,
    ThreadBusy,
    TooLarge,
    Unauthenticated,
    Unavailable,
)


class TypedErrorsTest(harness.ServerTest):
    def assert_envelope(self, error: RunledgerError, cls: type, code: str, status: int) -> None:
        self.assertIs(type(error), cls)
        self.assertIsInstance(error, RunledgerError)
        self.assertEqual(error.code, code)
        self.assertEqual(error.status, status)
        self.assertTrue(error.request_id)
        self.assertTrue(error.message)
        self.assertIsInstance(error.details, dict)

    def claimed(self, client, slot=None, **dispatch):
        """A fresh run, claimed by a fresh incarnation of a fresh slot: (run id, incarnation)."""
        run_id = self.dispatch(client, **dispatch)
        incarnation = Incarnation(client, slot or f"s-{uuid.uuid4().hex[:8]}")
        runs = incarnation.claim()
        self.assertEqual([r.run_id for r in runs], [run_id])
        return runs[0], incarnation

    def test_not_found(self):
        with self.assertRaises(NotFound) as caught:
            self.client().get_run(str(uuid.uuid4()))
        self.assert_envelope(caught.exception, NotFound, "not_found", 404)

    def test_unauthenticated(self):
        client = Client(self.server.url, "not-a-token")
        self.addCleanup(client.close)
        with self.assertRaises(Unauthenticated) as caught:
            client.list_runs(status="queued")
        self.assert_envelope(caught.exception, Unauthenticated, "unauthenticated", 401)
        self.assertNotIn("not-a-token", str(caught.exception))

    def test_forbidden_outside_the_tokens_slot_glob(self):
        client = Client(self.server.url, self.server.token("glob", slots="py-*"))
        self.addCleanup(client.close)
        self.assertEqual(client.claim("py-1", str(uuid.uuid4())), [])
        with self.assertRaises(Forbidden) as caught:
            client.claim("other-1", str(uuid.uuid4()))
        self.assert_envelope(caught.exception, Forbidden, "forbidden", 403)

    def test_invalid_argument_names_the_field(self):
        with self.assertRaises(InvalidArgument) as caught:
            self.client().claim("s", str(uuid.uuid4()), max=0)
        self.assert_envelope(caught.exception, InvalidArgument, "invalid_argument", 422)
        self.assertEqual(caught.exception.field, "max")

    def test_malformed_json(self):
        client = self.client()
        with self.assertRaises(Malformed) as caught:
            client.transport.request("POST", "/v1/runs/claim", raw_body=b"{not json",
                                     content_type="application/json")
        self.assert_envelope(caught.exception, Malformed, "malformed", 400)

    def test_too_large(self):
        client = self.client()
        with self.assertRaises(TooLarge) as caught:
            client.claim("x" * (2 << 20), str(uuid.uuid4()))
        self.assert_envelope(caught.exception, TooLarge, "too_large", 413)
        self.assertEqual(client.list_runs(status="queued")["runs"], [])  # the client goes on

    def test_thread_busy_names_the_live_run(self):
        client = self.client()
        first = self.dispatch(client, thread_key="busy-thread")
        with self.assertRaises(ThreadBusy) as caught:
            self.dispatch(client, thread_key="busy-thread")
        self.assert_envelope(caught.exception, ThreadBusy, "thread_busy", 409)
        self.assertEqual(caught.exception.live_run_id, first)

    def test_conflict_is_another_finish(self):
        client = self.client()
        run, _ = self.claimed(client)
        client.finish(run.run_id, run.generation, result={"a": 1})
        client.finish(run.run_id, run.generation, result={"a": 1})  # the same: answered again
        with self.assertRaises(Conflict) as caught:
            client.finish(run.run_id, run.generation, result={"a": 2})
        self.assert_envelope(caught.exception, Conflict, "conflict", 409)

    def test_fenced_and_superseded_after_a_new_incarnation(self):
        client = self.client()
        slot = f"s-{uuid.uuid4().hex[:8]}"
        old_run, old = self.claimed(client, slot)
        successor = Incarnation(client, slot)
        [taken] = successor.claim()
        self.assertEqual(taken.run_id, old_run.run_id)
        self.assertTrue(taken.reclaimed)
        with self.assertRaises(Fenced) as caught:
            old_run.append("user", "late")
        self.assert_envelope(caught.exception, Fenced, "fenced", 409)
        self.assertFalse(caught.exception.retryable)
        self.assertTrue(old_run.lost)
        with self.assertRaises(Superseded) as superseded:
            old.claim()
        self.assert_envelope(superseded.exception, Superseded, "superseded", 409)
        self.assertTrue(old.superseded)
        with self.assertRaises(Superseded):
            old.claim()  # refused by the client itself from now on
        taken.finish()

    def test_budget_exhausted(self):
        client = self.client()
        run, _ = self.claimed(client, budget={"wall_s": 600, "max_steps": 1})
        with self.assertRaises(BudgetExhausted) as caught:
            client.intent(run.run_id, run.generation, 2, "bash", "c2", {})
        self.assert_envelope(caught.exception, BudgetExhausted, "budget_exhausted", 409)
        self.assertEqual(client.get_run(run.run_id)["status"], "failed")

    def test_unavailable_once_the_repeats_run_out(self):
        client = self.client(retry=RetryPolicy(attempts=2, base_s=0.01, cap_s=0.01))
        self.server.cut_database()
        try:
            with self.assertRaises(Unavailable) as caught:
                client.list_runs(status="queued")
        finally:
            self.server.restore_database()
        self.assert_envelope(caught.exception, Unavailable, "unavailable", 503)
        self.assertTrue(caught.exception.retryable)
        self.assertEqual(client.transport.stats.repeats_after_unavailable, 1)
        harness.wait_until(client.ready, 30, "the server to reach the database again")

    def test_answer_lost_when_nothing_listens(self):
        with socket.create_server(("127.0.0.1", 0)) as s:
            port = s.getsockname()[1]  # closed at once: nothing listens there
        client = Client(f"http://127.0.0.1:{port}", self.token,
                        retry=RetryPolicy(attempts=3, base_s=0.01, cap_s=0.01))
        with self.assertRaises(AnswerLost) as caught:
            client.get_run(str(uuid.uuid4()))
        self.assertIsInstance(caught.exception, Unavailable)
        self.assertIsNone(caught.exception.status)
        self.assertEqual(client.transport.stats.requests, 3)


if __name__ == "__main__":
    import unittest

    unittest.main()
