-- No way to move the database clock in production (issue 14).
--
-- Until now every database carried the tests' clock: runledger_now() added the value of the
-- sequence runledger_clock_skew_us, which runledger_move_clock(ms) raised. Any session that could
-- call that function, or setval the sequence, could expire every lease at once, and a REVOKE would
-- stop nobody: the embedded cluster's application role is the initdb superuser.
--
-- From here runledger_now() is now(), and neither the function nor the sequence exists. The
-- movable clock is installed explicitly into test databases only, by code the runledger binary
-- does not contain (migrations/test_clock/test_clock.h: the test template gets it, and workflow authors'
-- tests through coordinator::testing::install_test_clock). A later migration that replaces
-- runledger_now() replaces a test clock too; runledger_move_clock() then refuses to move.
--
-- Still PL/pgSQL, STABLE, PARALLEL SAFE, with the same signature: every statement plans and calls
-- it exactly as before, and the body is a simple expression that PL/pgSQL evaluates without the
-- executor, now without the sequence's read (100,000 calls: ~76 ms against ~139 ms, medians of 12
-- paired rounds in one session). A LANGUAGE sql body would be inlined, free to run but parsed
-- again at every planning of every call site (a custom plan, a simple-protocol query).
--
-- A database whose skew was not 0 (only a test moves it) goes back to now(): its leases and due
-- times come later than they did, and safety never depended on the clock (the generation decides
-- whether a write lands).
CREATE OR REPLACE FUNCTION runledger_now() RETURNS timestamptz
  LANGUAGE plpgsql STABLE PARALLEL SAFE
  AS $$ BEGIN RETURN now(); END $$;

DROP FUNCTION IF EXISTS runledger_move_clock(bigint);
DROP SEQUENCE IF EXISTS runledger_clock_skew_us;
