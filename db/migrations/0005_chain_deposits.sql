CREATE TABLE "chain_arrivals" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"network" text NOT NULL,
	"asset" text NOT NULL,
	"address" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	"tx_hash" text NOT NULL,
	"block" text NOT NULL,
	"state" text NOT NULL,
	"disposition" text NOT NULL,
	"account_id" text,
	"deposit_id" text,
	"deposit_address_id" text,
	"observed_at" timestamp with time zone NOT NULL,
	"final_at" timestamp with time zone NOT NULL,
	"finalized_at" timestamp with time zone,
	"resolved_at" timestamp with time zone,
	"resolution_note" text
);
--> statement-breakpoint
CREATE TABLE "chain_withdrawals" (
	"withdrawal_id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"network" text NOT NULL,
	"asset" text NOT NULL,
	"to_address" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	"tx_hash" text NOT NULL,
	"block" text NOT NULL,
	"confirmations_required" integer NOT NULL,
	"state" text NOT NULL,
	"failure_reason" text,
	"submitted_at" timestamp with time zone NOT NULL,
	"final_at" timestamp with time zone NOT NULL,
	"settled_at" timestamp with time zone,
	"acknowledged_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "deposit_addresses" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"network" text NOT NULL,
	"address" text NOT NULL,
	"derivation_index" integer NOT NULL,
	"state" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"retired_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "deposits" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"network" text NOT NULL,
	"source" text NOT NULL,
	"state" text NOT NULL,
	"expected_amount" numeric(38, 0),
	"received_amount" numeric(38, 0),
	"amount_match" text,
	"deposit_address_id" text,
	"address" text NOT NULL,
	"arrival_id" text,
	"tx_hash" text,
	"expires_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL,
	"arrived_at" timestamp with time zone,
	"completed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "allowlist_entries" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"network" text NOT NULL,
	"address" text NOT NULL,
	"label" text,
	"state" text NOT NULL,
	"activates_at" timestamp with time zone NOT NULL,
	"activated_at" timestamp with time zone,
	"removed_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "withdrawal_approval_thresholds" (
	"org_id" text NOT NULL,
	"asset" text NOT NULL,
	"threshold" numeric(38, 0) NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "withdrawal_approval_thresholds_org_id_asset_pk" PRIMARY KEY("org_id","asset")
);
--> statement-breakpoint
CREATE TABLE "withdrawals" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"allowlist_entry_id" text NOT NULL,
	"quote_id" text NOT NULL,
	"network" text NOT NULL,
	"asset" text NOT NULL,
	"address" text NOT NULL,
	"amount" numeric(38, 0) NOT NULL,
	"network_fee" numeric(38, 0) NOT NULL,
	"service_fee" numeric(38, 0) NOT NULL,
	"total_debited" numeric(38, 0) NOT NULL,
	"state" text NOT NULL,
	"approval_required" boolean NOT NULL,
	"created_by_key_id" text NOT NULL,
	"approved_by_type" text,
	"approved_by" text,
	"approved_at" timestamp with time zone,
	"rejected_by_type" text,
	"rejected_by" text,
	"unsigned_transaction" jsonb,
	"tx_hash" text,
	"submitted_at" timestamp with time zone,
	"chain_evidence" jsonb,
	"failure_reason" text,
	"created_at" timestamp with time zone NOT NULL,
	"closed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE UNIQUE INDEX "chain_arrivals_observation_key" ON "chain_arrivals" USING btree ("network","tx_hash","address");--> statement-breakpoint
CREATE INDEX "chain_arrivals_org_idx" ON "chain_arrivals" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "chain_arrivals_confirming_idx" ON "chain_arrivals" USING btree ("state") WHERE "chain_arrivals"."state" = 'confirming';--> statement-breakpoint
CREATE INDEX "chain_withdrawals_open_idx" ON "chain_withdrawals" USING btree ("state","acknowledged_at");--> statement-breakpoint
CREATE UNIQUE INDEX "deposit_addresses_address_key" ON "deposit_addresses" USING btree ("network","address");--> statement-breakpoint
CREATE UNIQUE INDEX "deposit_addresses_one_active_key" ON "deposit_addresses" USING btree ("org_id","account_id","asset","network") WHERE "deposit_addresses"."state" = 'active';--> statement-breakpoint
CREATE UNIQUE INDEX "deposit_addresses_index_key" ON "deposit_addresses" USING btree ("org_id","account_id","asset","network","derivation_index");--> statement-breakpoint
CREATE INDEX "deposits_org_idx" ON "deposits" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "deposits_account_idx" ON "deposits" USING btree ("org_id","account_id","id");--> statement-breakpoint
CREATE INDEX "deposits_awaiting_idx" ON "deposits" USING btree ("address","state") WHERE "deposits"."state" = 'awaiting_funds';--> statement-breakpoint
CREATE INDEX "allowlist_entries_account_idx" ON "allowlist_entries" USING btree ("org_id","account_id","id");--> statement-breakpoint
CREATE INDEX "allowlist_entries_pending_idx" ON "allowlist_entries" USING btree ("state","org_id");--> statement-breakpoint
CREATE UNIQUE INDEX "allowlist_entries_live_unique" ON "allowlist_entries" USING btree ("org_id","account_id","network","address") WHERE state <> 'removed';--> statement-breakpoint
CREATE INDEX "withdrawals_org_idx" ON "withdrawals" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "withdrawals_account_idx" ON "withdrawals" USING btree ("org_id","account_id","id");--> statement-breakpoint
CREATE INDEX "withdrawals_state_idx" ON "withdrawals" USING btree ("state");--> statement-breakpoint
CREATE UNIQUE INDEX "withdrawals_quote_unique" ON "withdrawals" USING btree ("quote_id");