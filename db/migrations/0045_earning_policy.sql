CREATE TABLE "save_policies" (
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"vault_id" text NOT NULL,
	"buffer" numeric(38, 0) NOT NULL,
	"enabled" boolean NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "save_policies_org_id_account_id_pk" PRIMARY KEY("org_id","account_id"),
	CONSTRAINT "save_policies_buffer_nonnegative" CHECK ("buffer" >= 0)
);
--> statement-breakpoint
CREATE INDEX "save_policies_enabled_idx" ON "save_policies" USING btree ("enabled","org_id");
--> statement-breakpoint
CREATE TABLE "save_policy_runs" (
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"day" date NOT NULL,
	"vault_id" text NOT NULL,
	"outcome" text NOT NULL,
	"reason" text,
	"amount" numeric(38, 0),
	"intent_id" text,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "save_policy_runs_org_id_account_id_day_pk" PRIMARY KEY("org_id","account_id","day")
);
--> statement-breakpoint
CREATE TABLE "vault_accruals" (
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"vault_id" text NOT NULL,
	"day" date NOT NULL,
	"asset" text NOT NULL,
	"shares_open" numeric(38, 0) NOT NULL,
	"shares_close" numeric(38, 0) NOT NULL,
	"time_weighted_shares" numeric(38, 0) NOT NULL,
	"price_open" numeric(38, 0) NOT NULL,
	"price_close" numeric(38, 0) NOT NULL,
	"gross" numeric(38, 0) NOT NULL,
	"fee" numeric(38, 0) NOT NULL,
	"net" numeric(38, 0) NOT NULL,
	"fee_bps" integer NOT NULL,
	"computed_at" timestamp with time zone NOT NULL,
	CONSTRAINT "vault_accruals_org_id_account_id_vault_id_day_pk" PRIMARY KEY("org_id","account_id","vault_id","day"),
	CONSTRAINT "vault_accruals_net" CHECK ("net" = "gross" - "fee"),
	CONSTRAINT "vault_accruals_fee_nonnegative" CHECK ("fee" >= 0)
);
--> statement-breakpoint
CREATE INDEX "vault_accruals_day_idx" ON "vault_accruals" USING btree ("org_id","day");
--> statement-breakpoint
CREATE INDEX "vault_intents_instant_idx" ON "vault_intents" USING btree ("vault_id","settled_at") WHERE "mode" = 'instant';
--> statement-breakpoint
CREATE TABLE "vault_accrual_days" (
	"vault_id" text NOT NULL,
	"day" date NOT NULL,
	"positions" integer NOT NULL,
	"computed_at" timestamp with time zone NOT NULL,
	CONSTRAINT "vault_accrual_days_vault_id_day_pk" PRIMARY KEY("vault_id","day")
);
