-- In cluster mode a cycle's settlement or roll back is decided once, on the cycle (what, at which
-- price, with which venue digest), and then carried out organization by organization, each by the
-- server that owns it (docs/scale-out.md, "Earning in a cluster"). The cycle stays closed until
-- every organization's part is done; a retry finds the decision and carries out what is left.
ALTER TABLE vault_cycles ADD COLUMN resolution text;
--> statement-breakpoint
ALTER TABLE vault_cycles ADD COLUMN resolution_price numeric(38, 0);
--> statement-breakpoint
ALTER TABLE vault_cycles ADD COLUMN resolution_digest text;
--> statement-breakpoint
ALTER TABLE vault_cycles ADD CONSTRAINT vault_cycles_resolution_check CHECK (resolution IS NULL OR resolution IN ('settle', 'rollback'));
