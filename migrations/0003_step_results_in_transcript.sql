-- Which transcript entry carries each step's tool_result: settlement appends the missing ones
-- without parsing transcript bytes.
ALTER TABLE run_steps ADD COLUMN result_seq bigint;
