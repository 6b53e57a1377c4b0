-- An authorization's reservation is recorded by its payment's row, not by a row of ledger_movements
-- (server/ledger/journal.ts): the journal derives its two legs (the amount from the account's
-- available to its held) from the columns below, on every payment whose hold_id is set. Those
-- columns are therefore ledger history, as movements are: once a payment records a reservation,
-- the database refuses any change to them and its deletion, whatever the code does. Its state and
-- what follows the reservation (capture, release, lapse) still change as before; a hold is never
-- added to a payment after it was written, since its reservation committed with the row or not at all.
CREATE OR REPLACE FUNCTION payments_keep_reservation_record() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.hold_id IS NOT NULL THEN
      RAISE EXCEPTION 'payment % records a reservation in the ledger: DELETE refused', OLD.id;
    END IF;
    RETURN OLD;
  END IF;
  IF (OLD.hold_id IS NOT NULL OR NEW.hold_id IS NOT NULL)
     AND (NEW.id, NEW.org_id, NEW.account_id, NEW.asset, NEW.amount, NEW.hold_id)
         IS DISTINCT FROM (OLD.id, OLD.org_id, OLD.account_id, OLD.asset, OLD.amount, OLD.hold_id) THEN
    RAISE EXCEPTION 'payment % records a reservation in the ledger: its id, organization, account, asset, amount and hold are append-only', OLD.id;
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
--> statement-breakpoint
CREATE TRIGGER payments_reservation_record BEFORE UPDATE OR DELETE ON payments
  FOR EACH ROW EXECUTE FUNCTION payments_keep_reservation_record();
