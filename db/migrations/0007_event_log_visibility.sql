-- Every event records the id of the transaction that wrote it. Sequence numbers are taken when a row
-- is inserted, not when its transaction commits, so a reader of "seq > cursor" could pass an event
-- whose transaction commits late. Readers instead order the log by (txid, seq) and serve only rows
-- whose txid is below the snapshot's xmin: every such transaction has finished, and every
-- transaction still to commit has a larger id, so what is served is always a prefix of the final log.
ALTER TABLE "events" ADD COLUMN "txid" xid8 NOT NULL DEFAULT pg_current_xact_id();
--> statement-breakpoint
CREATE INDEX "events_txid_seq_idx" ON "events" USING btree ("txid", "seq");
--> statement-breakpoint
CREATE INDEX "events_org_txid_seq_idx" ON "events" USING btree ("org_id", "txid", "seq");
--> statement-breakpoint
INSERT INTO "webhook_outbox_cursor" ("name", "last_txid", "last_seq") VALUES ('deliveries', '0'::xid8, 0) ON CONFLICT DO NOTHING;
