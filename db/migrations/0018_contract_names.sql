-- The contract's names for stored states (docs/changes.md lists every rename). Rows written before
-- the rename are rewritten here, so every reader sees one name for one state.
-- A payment authorization that lapsed uncaptured after 24 h is `lapsed` (its event stays payment.expired).
UPDATE "payments" SET "state" = 'lapsed' WHERE "state" = 'expired';
--> statement-breakpoint
-- A declined authorization's failureCode is the contract's error code for its reason, the one a
-- transfer or a hold answers for the same reason: insufficient_funds -> insufficient_available,
-- amount_too_small -> min_amount. The payment.declined events that carry it say it the same way.
UPDATE "payments" SET "failure_code" = CASE "failure_code" WHEN 'insufficient_funds' THEN 'insufficient_available' ELSE 'min_amount' END
  WHERE "failure_code" IN ('insufficient_funds', 'amount_too_small');
--> statement-breakpoint
UPDATE "events" SET "data" = jsonb_set("data", '{failureCode}', to_jsonb(CASE "data"->>'failureCode' WHEN 'insufficient_funds' THEN 'insufficient_available' ELSE 'min_amount' END))
  WHERE "type" = 'payment.declined' AND "data"->>'failureCode' IN ('insufficient_funds', 'amount_too_small');
--> statement-breakpoint
-- An allowlist entry in its 24 h timelock is `registered` (then `active`).
UPDATE "allowlist_entries" SET "state" = 'registered' WHERE "state" = 'pending';
--> statement-breakpoint
-- A withdrawal that succeeded on chain is `confirmed` (its event stays treasury.withdrawal.completed;
-- treasury.withdrawal.confirmed is reserved by the contract and never emitted).
UPDATE "withdrawals" SET "state" = 'confirmed' WHERE "state" = 'completed';
--> statement-breakpoint
-- Funding deposits (declared deposits, deposit-address arrivals, assigned suspense arrivals) no
-- longer use transaction.deposit.*, the names of vault deposit intents: their event is
-- funding.deposit.confirmed, and a declared deposit's intentId is txi_ with its deposit's identifier.
UPDATE "events" SET "type" = 'funding.deposit.confirmed',
  "data" = CASE WHEN "data"->>'intentId' LIKE 'dep\_%'
    THEN jsonb_set("data", '{intentId}', to_jsonb('txi_' || substr("data"->>'intentId', 5)))
    ELSE "data" END
  WHERE "type" = 'transaction.deposit.confirmed';
--> statement-breakpoint
-- Endpoints keep receiving the funding deposits they subscribed to: an exact subscription to the old
-- name moves to the new one, and one to transaction.* also names the new one.
UPDATE "webhook_endpoints" SET "events" = array_replace("events", 'transaction.deposit.confirmed', 'funding.deposit.confirmed')
  WHERE 'transaction.deposit.confirmed' = ANY("events") AND NOT 'funding.deposit.confirmed' = ANY("events");
--> statement-breakpoint
UPDATE "webhook_endpoints" SET "events" = array_append("events", 'funding.deposit.confirmed')
  WHERE 'transaction.*' = ANY("events") AND NOT ("events" && ARRAY['*', 'funding.*', 'funding.deposit.confirmed']);
