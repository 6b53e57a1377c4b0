-- Who serves this database: the serving process holds a session-level advisory lock for its whole
-- life (db/serving-lock.ts), and writes here who it is once it listens, so that a second server,
-- refused, can name it. A row is current only while its backend_pid holds the lock.
CREATE TABLE "serving_instance" (
	"lock_name" text PRIMARY KEY NOT NULL,
	"backend_pid" integer NOT NULL,
	"host" text NOT NULL,
	"pid" integer NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"listen" text NOT NULL,
	"announced_at" timestamp with time zone NOT NULL
);
