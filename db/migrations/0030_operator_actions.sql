CREATE TABLE "operator_actions" (
	"id" text PRIMARY KEY NOT NULL,
	"operator" text NOT NULL,
	"token_fingerprint" text NOT NULL,
	"action" text NOT NULL,
	"target_id" text NOT NULL,
	"org_id" text,
	"outcome" text NOT NULL,
	"error_code" text,
	"detail" jsonb NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE INDEX "operator_actions_target_idx" ON "operator_actions" USING btree ("target_id");
