CREATE TABLE "ledger_writer_sequences" (
	"writer_id" text PRIMARY KEY NOT NULL,
	"seq" bigint NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
DROP INDEX "events_org_seq_idx";--> statement-breakpoint
ALTER TABLE "ledger_balances" ADD CONSTRAINT "ledger_balances_total" CHECK ("ledger_balances"."total" = "ledger_balances"."available" + "ledger_balances"."held" + "ledger_balances"."in_flight");--> statement-breakpoint
-- The writer's order guard lives only as long as its writer: no WAL for it.
ALTER TABLE "ledger_writer_sequences" SET UNLOGGED;
--> statement-breakpoint
-- Lets one statement refuse itself with a clear message (a CTE cannot RAISE): the writer's batch
-- calls it when its order guard does not hold, which aborts the whole statement.
CREATE OR REPLACE FUNCTION kassa_refuse(message text) RETURNS text AS $$
BEGIN
  RAISE EXCEPTION '%', message USING ERRCODE = 'KS001';
END;
$$ LANGUAGE plpgsql;
