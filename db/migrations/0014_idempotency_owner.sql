ALTER TABLE "idempotency_records" ADD COLUMN "owner" text;
