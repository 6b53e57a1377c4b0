-- Sealed daily statements (server/modules/statements/). Statements, the sealed dates and the signing
-- keys are only ever appended: the database refuses UPDATE, DELETE and TRUNCATE on them, whatever the code does.
CREATE TABLE "business_days" (
	"org_id" text PRIMARY KEY NOT NULL,
	"time_zone" text NOT NULL,
	"cutoff_hour" integer NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "business_days_cutoff_hour" CHECK ("cutoff_hour" >= 0 AND "cutoff_hour" <= 23)
);
--> statement-breakpoint
CREATE TABLE "statements" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"business_date" text NOT NULL,
	"period_start" timestamp with time zone NOT NULL,
	"period_end" timestamp with time zone NOT NULL,
	"closing_balance" numeric(38, 0) NOT NULL,
	"line_count" integer NOT NULL,
	"invariant_ok" boolean NOT NULL,
	"previous_hash" text,
	"hash" text NOT NULL,
	"key_id" text NOT NULL,
	"signature" text NOT NULL,
	"body" text NOT NULL,
	"sealed_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "statements_account_date_idx" ON "statements" USING btree ("org_id","account_id","asset","business_date");
--> statement-breakpoint
CREATE TABLE "statement_days" (
	"org_id" text NOT NULL,
	"business_date" text NOT NULL,
	"period_start" timestamp with time zone NOT NULL,
	"period_end" timestamp with time zone NOT NULL,
	"time_zone" text NOT NULL,
	"cutoff_hour" integer NOT NULL,
	"statements" integer NOT NULL,
	"sealed_at" timestamp with time zone NOT NULL,
	CONSTRAINT "statement_days_org_id_business_date_pk" PRIMARY KEY("org_id","business_date")
);
--> statement-breakpoint
CREATE TABLE "statement_signing_keys" (
	"kid" text PRIMARY KEY NOT NULL,
	"public_jwk" jsonb NOT NULL,
	"private_jwk" jsonb NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE INDEX "statement_signing_keys_created_idx" ON "statement_signing_keys" USING btree ("created_at");
--> statement-breakpoint
CREATE INDEX "ledger_movements_org_created_idx" ON "ledger_movements" USING btree ("org_id","created_at");
--> statement-breakpoint
CREATE OR REPLACE FUNCTION statements_refuse_change() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'sealed statements are append-only: % on % refused', TG_OP, TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql;
--> statement-breakpoint
CREATE TRIGGER statements_append_only BEFORE UPDATE OR DELETE ON statements
  FOR EACH ROW EXECUTE FUNCTION statements_refuse_change();
--> statement-breakpoint
CREATE TRIGGER statements_no_truncate BEFORE TRUNCATE ON statements
  FOR EACH STATEMENT EXECUTE FUNCTION statements_refuse_change();
--> statement-breakpoint
CREATE TRIGGER statement_days_append_only BEFORE UPDATE OR DELETE ON statement_days
  FOR EACH ROW EXECUTE FUNCTION statements_refuse_change();
--> statement-breakpoint
CREATE TRIGGER statement_days_no_truncate BEFORE TRUNCATE ON statement_days
  FOR EACH STATEMENT EXECUTE FUNCTION statements_refuse_change();
--> statement-breakpoint
CREATE TRIGGER statement_signing_keys_append_only BEFORE UPDATE OR DELETE ON statement_signing_keys
  FOR EACH ROW EXECUTE FUNCTION statements_refuse_change();
--> statement-breakpoint
CREATE TRIGGER statement_signing_keys_no_truncate BEFORE TRUNCATE ON statement_signing_keys
  FOR EACH STATEMENT EXECUTE FUNCTION statements_refuse_change();
