-- Rate-limit counters live for one 60-second window and are rebuilt by the next request; they need
-- no write-ahead log. Unlogged, the per-request increment no longer waits for a WAL flush, which
-- was the cost that dominated every /v1 request on the shared Postgres store.
ALTER TABLE "rate_limit_counters" SET UNLOGGED;
