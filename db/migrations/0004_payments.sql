CREATE TABLE "payments" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"account_id" text NOT NULL,
	"asset" text NOT NULL,
	"amount" numeric(38, 0),
	"requested_amount" text NOT NULL,
	"state" text NOT NULL,
	"failure_code" text,
	"hold_id" text,
	"captured_amount" numeric(38, 0),
	"merchant_name" text,
	"merchant_mcc" text,
	"description" text,
	"expires_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL,
	"closed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE INDEX "payments_org_idx" ON "payments" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "payments_account_idx" ON "payments" USING btree ("org_id","account_id","id");--> statement-breakpoint
CREATE INDEX "payments_state_idx" ON "payments" USING btree ("state");