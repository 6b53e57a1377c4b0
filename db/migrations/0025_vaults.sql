CREATE TABLE "vaults" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"asset" text NOT NULL,
	"state" text NOT NULL,
	"min_subscription" numeric(38, 0) NOT NULL,
	"min_redemption" numeric(38, 0) NOT NULL,
	"deposit_cycle_seconds" integer,
	"redeem_cycle_seconds" integer,
	"instant_fee_bps" integer NOT NULL,
	"subscription_fee_bps" integer NOT NULL,
	"platform_fee_bps" integer NOT NULL,
	"payout_mode" text NOT NULL,
	"price_max_age_seconds" integer NOT NULL,
	"instant_buffer" numeric(38, 0) NOT NULL,
	"initial_price" numeric(38, 0) NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "vaults_instant_buffer_nonnegative" CHECK ("instant_buffer" >= 0)
);
--> statement-breakpoint
CREATE TABLE "vault_prices" (
	"vault_id" text NOT NULL,
	"at" timestamp with time zone NOT NULL,
	"price" numeric(38, 0) NOT NULL,
	"source" text NOT NULL,
	CONSTRAINT "vault_prices_vault_id_at_pk" PRIMARY KEY("vault_id","at")
);
--> statement-breakpoint
CREATE TABLE "sandbox_venue_navs" (
	"vault_id" text PRIMARY KEY NOT NULL,
	"nav" numeric(38, 0) NOT NULL,
	"nav_at" timestamp with time zone NOT NULL,
	"daily_rate_ppb" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "vault_clock" (
	"id" text PRIMARY KEY NOT NULL,
	"offset_ms" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "vault_cycles" (
	"id" text PRIMARY KEY NOT NULL,
	"vault_id" text NOT NULL,
	"kind" text NOT NULL,
	"number" integer NOT NULL,
	"state" text NOT NULL,
	"opened_at" timestamp with time zone NOT NULL,
	"closed_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"price" numeric(38, 0),
	"total_amount" numeric(38, 0),
	"total_shares" numeric(38, 0),
	"fee" numeric(38, 0),
	"intents" integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX "vault_cycles_number_idx" ON "vault_cycles" USING btree ("vault_id","kind","number");
--> statement-breakpoint
CREATE INDEX "vault_cycles_state_idx" ON "vault_cycles" USING btree ("state","vault_id");
--> statement-breakpoint
CREATE TABLE "vault_intents" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"vault_id" text NOT NULL,
	"kind" text NOT NULL,
	"mode" text NOT NULL,
	"cycle_id" text,
	"record_id" text NOT NULL,
	"state" text NOT NULL,
	"reason" text,
	"amount" numeric(38, 0),
	"fee" numeric(38, 0) NOT NULL,
	"shares" numeric(38, 0),
	"payout" text,
	"claimed_at" timestamp with time zone,
	"quote_id" text,
	"created_at" timestamp with time zone NOT NULL,
	"settled_at" timestamp with time zone
);
--> statement-breakpoint
CREATE UNIQUE INDEX "vault_intents_record_idx" ON "vault_intents" USING btree ("org_id","record_id");
--> statement-breakpoint
CREATE INDEX "vault_intents_cycle_idx" ON "vault_intents" USING btree ("cycle_id","state");
--> statement-breakpoint
CREATE INDEX "vault_intents_account_idx" ON "vault_intents" USING btree ("org_id","account_id","id");
