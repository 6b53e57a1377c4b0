CREATE TABLE "holds" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	"state" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"captured_amount" numeric(38, 0),
	"transfer_id" text,
	"created_at" timestamp with time zone NOT NULL,
	"closed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "ledger_balances" (
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"kind" text NOT NULL,
	"available" numeric(38, 0) NOT NULL,
	"held" numeric(38, 0) NOT NULL,
	"in_flight" numeric(38, 0) NOT NULL,
	"total" numeric(38, 0) NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "ledger_balances_org_id_account_id_asset_pk" PRIMARY KEY("org_id","account_id","asset"),
	CONSTRAINT "ledger_balances_customer_nonnegative" CHECK ("ledger_balances"."kind" <> 'customer' or ("ledger_balances"."available" >= 0 and "ledger_balances"."held" >= 0 and "ledger_balances"."in_flight" >= 0))
);
--> statement-breakpoint
CREATE TABLE "ledger_movements" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"kind" text NOT NULL,
	"reference" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "ledger_postings" (
	"movement_id" text NOT NULL,
	"leg" integer NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"bucket" text NOT NULL,
	"asset" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	CONSTRAINT "ledger_postings_movement_id_leg_pk" PRIMARY KEY("movement_id","leg"),
	CONSTRAINT "ledger_postings_amount_nonzero" CHECK ("ledger_postings"."amount" <> 0)
);
--> statement-breakpoint
CREATE TABLE "quotes" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"kind" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	"network_fee" numeric(38, 0) NOT NULL,
	"service_fee" numeric(38, 0) NOT NULL,
	"total_debited" numeric(38, 0) NOT NULL,
	"state" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"consumed_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "transfers" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"source_account_id" text NOT NULL,
	"destination_account_id" text NOT NULL,
	"asset" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	"fee" numeric(38, 0) NOT NULL,
	"fee_model" text NOT NULL,
	"net_amount" numeric(38, 0) NOT NULL,
	"total_debited" numeric(38, 0) NOT NULL,
	"hold_id" text,
	"description" text,
	"state" text NOT NULL,
	"movement_id" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE INDEX "holds_org_idx" ON "holds" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "holds_state_idx" ON "holds" USING btree ("state");--> statement-breakpoint
CREATE INDEX "ledger_movements_org_idx" ON "ledger_movements" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "ledger_movements_reference_idx" ON "ledger_movements" USING btree ("reference");--> statement-breakpoint
CREATE INDEX "ledger_postings_account_idx" ON "ledger_postings" USING btree ("org_id","account_id","asset");--> statement-breakpoint
CREATE INDEX "quotes_org_idx" ON "quotes" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "transfers_org_idx" ON "transfers" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "transfers_source_idx" ON "transfers" USING btree ("org_id","source_account_id","id");--> statement-breakpoint
CREATE INDEX "transfers_destination_idx" ON "transfers" USING btree ("org_id","destination_account_id","id");