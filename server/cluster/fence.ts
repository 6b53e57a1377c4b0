import type { CommitFence } from '../ledger/fence.ts'
import { partitionOf } from './partitions.ts'

/**
 * The commit fence this cluster gives the ledger (`CommitFence`: a SQL condition that every batch
 * and transaction must satisfy to commit, and its parameter per batch). A batch
 * commits only while this server still holds, at the epoch it took them with, the partition of
 * every organization the batch writes for.
 *
 * The partitions' rows are read `for share`: a peer taking a partition (its `update ... epoch =
 * epoch + 1`) waits for a batch that has read the old epoch to commit, and a batch that reads
 * after the taking sees the new epoch and is refused. So once a taker's update has committed, no
 * batch of the former holder commits any more, and the taker's load of the organizations from
 * the database, which begins after its update, sees every batch that did.
 */
export function clusterFence(instanceId: string, partitionCount: number, epochOf: (partition: number) => bigint | undefined): CommitFence {
  // The instance id is checked at configuration (letters, digits and . _ : -), or made here; quoted all the same.
  const holder = `'${instanceId.replaceAll("'", "''")}'`
  return {
    condition:
      `not exists (select 1 from jsonb_to_recordset(:fence::jsonb) as f(p int, e bigint) where not exists ` +
      `(select 1 from cluster_partitions c where c.partition = f.p and c.holder = ${holder} and c.epoch = f.e for share))`,
    parameter(orgIds) {
      const entries: string[] = []
      const seen = new Set<number>()
      for (const orgId of orgIds) {
        const partition = partitionOf(orgId, partitionCount)
        if (seen.has(partition)) continue
        seen.add(partition)
        // A partition not held here has no epoch: -1 matches no row, and the batch is refused.
        entries.push(`{"p":${partition},"e":${String(epochOf(partition) ?? -1n)}}`)
      }
      return `[${entries.join(',')}]`
    },
  }
}
