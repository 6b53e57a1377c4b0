-- Quotes of kind instant_redeem name a vault and the shares they redeem.
ALTER TABLE "quotes" ADD COLUMN "vault_id" text;
--> statement-breakpoint
ALTER TABLE "quotes" ADD COLUMN "shares" numeric(38, 0);
