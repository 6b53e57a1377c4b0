CREATE TABLE "sbt_users" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"sui_address" text NOT NULL,
	"invite_code" text NOT NULL,
	"invited_by" bigint,
	"invited_at" timestamp with time zone,
	"bindings" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"score" integer DEFAULT 0 NOT NULL,
	"streak_days" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "sbt_users_address_format" CHECK ("sui_address" ~ '^0x[0-9a-f]{64}$')
);
--> statement-breakpoint
CREATE UNIQUE INDEX "sbt_users_address_idx" ON "sbt_users" USING btree ("sui_address");
--> statement-breakpoint
CREATE UNIQUE INDEX "sbt_users_invite_code_idx" ON "sbt_users" USING btree ("invite_code");
--> statement-breakpoint
CREATE INDEX "sbt_users_invited_by_idx" ON "sbt_users" USING btree ("invited_by","invited_at","id");
--> statement-breakpoint
CREATE TABLE "sbt_counters" (
	"name" text PRIMARY KEY NOT NULL,
	"value" bigint NOT NULL
);
--> statement-breakpoint
INSERT INTO "sbt_counters" ("name", "value") VALUES ('users', 0);
--> statement-breakpoint
CREATE FUNCTION "sbt_count_users_inserted"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE "sbt_counters" SET "value" = "value" + (SELECT count(*) FROM inserted) WHERE "name" = 'users';
	RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE FUNCTION "sbt_count_users_deleted"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE "sbt_counters" SET "value" = "value" - (SELECT count(*) FROM deleted) WHERE "name" = 'users';
	RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER "sbt_users_count_insert" AFTER INSERT ON "sbt_users" REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION "sbt_count_users_inserted"();
--> statement-breakpoint
CREATE TRIGGER "sbt_users_count_delete" AFTER DELETE ON "sbt_users" REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION "sbt_count_users_deleted"();
--> statement-breakpoint
CREATE TABLE "sbt_campaigns" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"is_default" integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "sbt_campaigns_one_default_idx" ON "sbt_campaigns" USING btree ("is_default") WHERE "is_default" = 1;
--> statement-breakpoint
CREATE TABLE "sbt_credential_groups" (
	"id" text PRIMARY KEY NOT NULL,
	"campaign_id" text NOT NULL REFERENCES "sbt_campaigns"("id"),
	"name" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sbt_credentials" (
	"id" text PRIMARY KEY NOT NULL,
	"group_id" text NOT NULL REFERENCES "sbt_credential_groups"("id"),
	"name" text NOT NULL,
	"label_type" integer NOT NULL,
	"params" jsonb DEFAULT '{}'::jsonb NOT NULL,
	CONSTRAINT "sbt_credentials_label_type_range" CHECK ("label_type" BETWEEN 1 AND 113)
);
--> statement-breakpoint
CREATE INDEX "sbt_credentials_group_idx" ON "sbt_credentials" USING btree ("group_id");
--> statement-breakpoint
CREATE TABLE "sbt_credential_results" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"user_id" bigint NOT NULL,
	"credential_id" text NOT NULL,
	"status" smallint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "sbt_results_user_credential_idx" ON "sbt_credential_results" USING btree ("user_id","credential_id","status");
--> statement-breakpoint
CREATE TABLE "sbt_clicks" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"user_id" bigint NOT NULL,
	"credential_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "sbt_clicks_user_credential_idx" ON "sbt_clicks" USING btree ("user_id","credential_id");
--> statement-breakpoint
CREATE TABLE "sbt_rewards" (
	"sbt_id" integer PRIMARY KEY NOT NULL,
	"kind" text NOT NULL,
	"group_id" text NOT NULL REFERENCES "sbt_credential_groups"("id"),
	"level" integer NOT NULL,
	"title" text NOT NULL,
	"task_name" text NOT NULL,
	"points" integer NOT NULL,
	"invites_required" integer,
	"usd_required" numeric,
	CONSTRAINT "sbt_rewards_kind" CHECK ("kind" IN ('social', 'referral', 'lockdrop')),
	CONSTRAINT "sbt_rewards_level_range" CHECK ("level" BETWEEN 1 AND 10)
);
--> statement-breakpoint
CREATE INDEX "sbt_rewards_group_idx" ON "sbt_rewards" USING btree ("group_id");
--> statement-breakpoint
CREATE TABLE "sbt_claims" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"user_id" bigint NOT NULL,
	"sbt_id" integer NOT NULL,
	"claim_type" smallint NOT NULL,
	"rail" text,
	"tx_digest" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "sbt_claims_claim_type" CHECK ("claim_type" BETWEEN 2 AND 5)
);
--> statement-breakpoint
CREATE UNIQUE INDEX "sbt_claims_user_sbt_idx" ON "sbt_claims" USING btree ("user_id","sbt_id");
--> statement-breakpoint
CREATE INDEX "sbt_claims_claimed_idx" ON "sbt_claims" USING btree ("user_id","claim_type");
--> statement-breakpoint
CREATE TABLE "sbt_tokens" (
	"id" text PRIMARY KEY NOT NULL,
	"token_hash" text NOT NULL UNIQUE,
	"environment" text NOT NULL,
	"label" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "sbt_tokens_environment" CHECK ("environment" IN ('staging', 'production'))
);
--> statement-breakpoint
CREATE TABLE "sbt_challenges" (
	"nonce" text PRIMARY KEY NOT NULL,
	"sui_address" text NOT NULL,
	"message" text NOT NULL,
	"invite_code" text,
	"expires_at" timestamp with time zone NOT NULL,
	"used_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "sbt_chain_facts" (
	"chain" text NOT NULL,
	"address" text NOT NULL,
	"fact" text NOT NULL,
	"amount" numeric NOT NULL,
	CONSTRAINT "sbt_chain_facts_pk" PRIMARY KEY ("chain","address","fact")
);
--> statement-breakpoint
CREATE TABLE "sbt_mints" (
	"digest" text PRIMARY KEY NOT NULL,
	"rail" text NOT NULL,
	"user_id" bigint NOT NULL,
	"sbt_id" integer NOT NULL,
	"tx_bytes" text NOT NULL,
	"status" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sbt_imports" (
	"document_hash" text PRIMARY KEY NOT NULL,
	"summary" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
