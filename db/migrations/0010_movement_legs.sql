-- A movement's legs move from rows of ledger_postings into arrays on the movement's own row (leg i
-- is amounts[i] of assets[i] on buckets[i] of accounts[i], in the order of the old leg numbers). An
-- authorization's two posting rows cost Postgres two heap tuples and four index entries, and no
-- query read postings by anything but their movement. Existing history is carried over as it was:
-- the append-only trigger is paused for this one rewrite, inside the migration's transaction.
ALTER TABLE "ledger_movements" ADD COLUMN "accounts" text[];--> statement-breakpoint
ALTER TABLE "ledger_movements" ADD COLUMN "buckets" text[];--> statement-breakpoint
ALTER TABLE "ledger_movements" ADD COLUMN "assets" text[];--> statement-breakpoint
ALTER TABLE "ledger_movements" ADD COLUMN "amounts" numeric(38, 0)[];--> statement-breakpoint
ALTER TABLE "ledger_movements" DISABLE TRIGGER "ledger_movements_append_only";--> statement-breakpoint
UPDATE "ledger_movements" AS m SET
  "accounts" = l."accounts", "buckets" = l."buckets", "assets" = l."assets", "amounts" = l."amounts"
FROM (
  SELECT "movement_id",
    array_agg("account_id" ORDER BY "leg") AS "accounts",
    array_agg("bucket" ORDER BY "leg") AS "buckets",
    array_agg("asset" ORDER BY "leg") AS "assets",
    array_agg("amount" ORDER BY "leg") AS "amounts"
  FROM "ledger_postings" GROUP BY "movement_id"
) AS l
WHERE l."movement_id" = m."id";--> statement-breakpoint
ALTER TABLE "ledger_movements" ENABLE TRIGGER "ledger_movements_append_only";--> statement-breakpoint
ALTER TABLE "ledger_movements" ALTER COLUMN "accounts" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "ledger_movements" ALTER COLUMN "buckets" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "ledger_movements" ALTER COLUMN "assets" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "ledger_movements" ALTER COLUMN "amounts" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "ledger_movements" ADD CONSTRAINT "ledger_movements_legs" CHECK (cardinality("ledger_movements"."amounts") >= 2 and cardinality("ledger_movements"."accounts") = cardinality("ledger_movements"."amounts") and cardinality("ledger_movements"."buckets") = cardinality("ledger_movements"."amounts") and cardinality("ledger_movements"."assets") = cardinality("ledger_movements"."amounts"));--> statement-breakpoint
ALTER TABLE "ledger_movements" ADD CONSTRAINT "ledger_movements_amounts_nonzero" CHECK (0 <> all("ledger_movements"."amounts"));--> statement-breakpoint
ALTER TABLE "ledger_movements" ADD CONSTRAINT "ledger_movements_buckets" CHECK ("ledger_movements"."buckets" <@ array['available', 'held', 'in_flight']::text[]);--> statement-breakpoint
DROP TABLE "ledger_postings";
