-- Indexes for the read APIs' keyset pages, newest first by (created_at, id): with the listing's
-- key in front, a page is one index scan that starts at the cursor's position and stops after
-- the page's rows, however many rows the listing holds. The statements they serve:
-- ledger/statements.h (kRunsWithStatus, kRunsInThread, kRunsOfRequester) and ship/statements.h
-- (kMessagesPage). A run's steps are paged by the primary key of run_steps (run_id, step_no).
CREATE INDEX live_runs_by_status_created ON live_runs (status, created_at, run_id);
CREATE INDEX live_runs_by_thread_created ON live_runs (thread_key, created_at, run_id);
CREATE INDEX live_runs_by_requester_created ON live_runs (requester, created_at, run_id);
CREATE INDEX thread_messages_by_thread_created ON thread_messages (thread_key, created_at, id);
