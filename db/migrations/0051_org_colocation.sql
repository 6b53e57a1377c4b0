-- Every table that holds an organization's data carries the organization's id in its primary key
-- or in an index that leads with it (docs/scale-out.md, "Beyond one database"); the test
-- test/structure/schema-colocation.test.ts reads the catalog and holds every table to it. Four
-- tables did not. Primary keys and ON CONFLICT targets stay as they are: they change only when the
-- database is distributed (the document lists those changes).
--
-- holds: a hold's row is read by its id, and only pending holds by anything else (the ledger's load
-- at start, and an owner taking over an organization in cluster mode, which wants that
-- organization's pending holds). The partial index on pending holds is keyed by organization
-- instead of by state: the same entries, written by the same statements, now able to find one
-- organization's pending holds. Its key is the organization's id (about 30 bytes) rather than the
-- constant 'pending': creating a hold writes about 30 bytes more WAL (9% of what its row and
-- indexes wrote, measured over 20,000 holds), closing one nothing more. A full (org_id, id) index
-- was measured at 59% more WAL for creating a hold and 32% more for closing one, for no reader:
-- migration 0009 dropped it for that reason.
DROP INDEX "holds_pending_idx";--> statement-breakpoint
CREATE INDEX "holds_pending_org_idx" ON "holds" USING btree ("org_id") WHERE "holds"."state" = 'pending';--> statement-breakpoint
-- webhook_deliveries: the open deliveries of one endpoint are cancelled when it is deleted; the
-- endpoint belongs to one organization, so the index that finds them leads with it, and the
-- cancelling statement names the organization (on a distributed database it then reaches one
-- shard instead of all). About 34 bytes more WAL for each entry, written when a delivery is
-- queued and at each attempt's lease (4% of a delivered delivery's WAL, measured over 20,000).
DROP INDEX "webhook_deliveries_webhook_idx";--> statement-breakpoint
CREATE INDEX "webhook_deliveries_open_idx" ON "webhook_deliveries" USING btree ("org_id", "webhook_id") WHERE "webhook_deliveries"."status" in ('pending', 'retrying');--> statement-breakpoint
-- chain_withdrawals (the sandbox chain's record of a withdrawal): an organization's withdrawals
-- still submitted, which the sandbox settles for that organization alone. One row per withdrawal.
CREATE INDEX "chain_withdrawals_org_idx" ON "chain_withdrawals" USING btree ("org_id", "state");--> statement-breakpoint
-- operator_actions: an organization's part of the audit trail, newest first. Platform-wide actions
-- (a vault paused) have no organization and sit under the null key. One row per operator action.
CREATE INDEX "operator_actions_org_idx" ON "operator_actions" USING btree ("org_id", "id");
