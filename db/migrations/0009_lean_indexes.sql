-- Every authorization writes an entry into each index of the tables it touches (18 entries before
-- this migration). Indexes no query reads go, and state lookups keep only the rows they look for.
--
-- events: the key is the id. Its unique index becomes the primary key (no rebuild), and `seq`, the
-- position in the log, keeps its sequence and NOT NULL without an index of its own (the log is read
-- in (txid, seq) order through events_txid_seq_idx and events_org_txid_seq_idx).
ALTER TABLE "events" DROP CONSTRAINT "events_pkey";--> statement-breakpoint
ALTER TABLE "events" ALTER COLUMN "seq" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "events" ADD CONSTRAINT "events_pkey" PRIMARY KEY USING INDEX "events_id_unique";--> statement-breakpoint
-- A hold is read by its id; nothing lists an organization's holds or movements in id order.
DROP INDEX "holds_org_idx";--> statement-breakpoint
DROP INDEX "ledger_movements_org_idx";--> statement-breakpoint
-- Only pending holds and authorized payments are looked up by state (at start).
DROP INDEX "holds_state_idx";--> statement-breakpoint
DROP INDEX "payments_state_idx";--> statement-breakpoint
CREATE INDEX "holds_pending_idx" ON "holds" USING btree ("state") WHERE "holds"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "payments_authorized_idx" ON "payments" USING btree ("state") WHERE "payments"."state" = 'authorized';
