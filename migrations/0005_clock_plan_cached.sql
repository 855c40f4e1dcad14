-- runledger_now() as PL/pgSQL: a LANGUAGE sql function whose body reads a table cannot be
-- inlined, and PostgreSQL 15 parses and plans such a body again on every call (measured: about
-- 115 µs of a 280 µs transcript append, through the created_at default). PL/pgSQL keeps the plan
-- for the session. Same result, same volatility: the skew is read in the caller's snapshot.
CREATE OR REPLACE FUNCTION runledger_now() RETURNS timestamptz
  LANGUAGE plpgsql STABLE PARALLEL SAFE
  AS $$ BEGIN RETURN now() + (SELECT skew FROM runledger_clock); END $$;
