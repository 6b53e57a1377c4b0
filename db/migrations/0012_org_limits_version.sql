-- Every change of an organization's rate limit raises limits_version, so an instance that reads the
-- row more than once (its own change, then the NOTIFY's refresh) keeps the newest, whatever order the
-- reads answer in. Existing rows start at 0.
ALTER TABLE "organizations" ADD COLUMN "limits_version" bigint DEFAULT 0 NOT NULL;
