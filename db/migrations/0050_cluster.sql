-- Cluster mode (docs/scale-out.md, "Cluster mode"): several servers on one database, each
-- organization's hot balances owned by one of them at a time.
--
-- The partition count is a row, not a constant in code: an organization's partition is a hash of
-- its id modulo this count, and a server built with another count would place organizations
-- elsewhere than its peers. A server reads it at start and refuses to run with a count it was
-- not built for.
CREATE TABLE "cluster_settings" (
	"singleton" boolean PRIMARY KEY DEFAULT true CHECK ("singleton"),
	"partition_count" integer NOT NULL CHECK ("partition_count" > 0)
);
--> statement-breakpoint
INSERT INTO "cluster_settings" ("singleton", "partition_count") VALUES (true, 64);
--> statement-breakpoint
-- Live members: each server writes its heartbeat here about once a second; a member whose
-- heartbeat is older than the lease time is not counted in the fair share.
CREATE TABLE "cluster_members" (
	"instance_id" text PRIMARY KEY NOT NULL,
	"internal_address" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL DEFAULT now(),
	"heartbeat_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
-- One lease per partition. `epoch` only grows: every taking adds one, and the ledger's commit
-- fence compares it, so a former holder's late batch cannot commit. `holder` null: released.
CREATE TABLE "cluster_partitions" (
	"partition" integer PRIMARY KEY NOT NULL,
	"holder" text,
	"epoch" bigint NOT NULL DEFAULT 0,
	"expires_at" timestamp with time zone NOT NULL DEFAULT '-infinity'
);
--> statement-breakpoint
INSERT INTO "cluster_partitions" ("partition") SELECT generate_series(0, 63);
