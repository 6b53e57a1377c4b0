-- The contract's names for stored states (docs/changes.md lists every rename). Rows written before
-- the rename are rewritten here, so every reader sees one name for one state.
-- A payment authorization that lapsed uncaptured after 24 h is `lapsed` (its event stays payment.expired).
UPDATE "payments" SET "state" = 'lapsed' WHERE "state" = 'expired';
