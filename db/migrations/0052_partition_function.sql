-- The partition an organization belongs to in cluster mode, as server/cluster/partitions.ts computes
-- it (FNV-1a, 32 bits, over the id's UTF-8 bytes, modulo the partition count), so that a background
-- pass can ask Postgres for the due work of the organizations this server owns only. The two must
-- agree for every id: test/cluster/partition-function.test.ts holds them to it.
CREATE OR REPLACE FUNCTION kassa_partition(org_id text, partition_count integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  bytes bytea := convert_to(org_id, 'UTF8');
  hash bigint := 2166136261;
BEGIN
  FOR i IN 0 .. length(bytes) - 1 LOOP
    hash := (hash # get_byte(bytes, i)) * 16777619 % 4294967296;
  END LOOP;
  RETURN (hash % partition_count)::integer;
END
$$;
