-- A payment is always read within its organization: by (org_id, id), or an organization's payments
-- in id order. The key becomes (org_id, id), which serves both, and the separate (org_id, id) index
-- goes: an authorization writes three index entries into payments instead of four. Ids stay unique
-- across organizations by construction (a UUIDv7's time and random bits).
ALTER TABLE "payments" DROP CONSTRAINT "payments_pkey";--> statement-breakpoint
ALTER TABLE "payments" ADD CONSTRAINT "payments_pkey" PRIMARY KEY("org_id","id");--> statement-breakpoint
DROP INDEX "payments_org_idx";
