import type postgres from 'postgres'

/** What this server does with a partition it holds in Postgres. */
export type PartitionState = 'loading' | 'serving' | 'releasing'

interface Held {
  epoch: bigint
  state: PartitionState
}

/** One partition as the last heartbeat read it: who holds it and where that server listens. */
export interface PartitionView {
  holder: string | null
  /** The holder's internal listener (`host:port`), or null when it has none on record. */
  address: string | null
  /** Whether the lease was unexpired when read. */
  live: boolean
}

export interface LeaseOptions {
  instanceId: string
  ttlMs: number
  heartbeatMs: number
  partitionCount: number
}

export interface LeaseHooks {
  /** Rebuilds the partitions' organizations in memory; they are served once it resolves. */
  load(partitions: readonly number[]): Promise<void>
  /** Waits until nothing of these partitions is on its way to the writer. */
  drain(partitions: readonly number[]): Promise<void>
  /** Forgets the partitions' organizations' memory (lost or given back). */
  forget(partitions: readonly number[]): void
  log(line: string): void
}

/**
 * This server's partition leases (docs/scale-out.md, "Cluster mode"). Each heartbeat, on a
 * connection of its own: the member row's heartbeat; the renewal of every lease held (a lease not
 * renewed is lost: another server took it, and its organizations are forgotten); then a look at
 * the table, taking unheld or expired partitions up to this server's fair share of the live
 * members (each taking adds one to the partition's epoch, which fences any former holder's late
 * commit), or giving back those over the share: they stop being served at once (requests for them
 * are answered 503 until the taker serves them), the writer drains them, and the lease is released.
 *
 * A lease counts as this server's only until `validUntil`: the time its latest renewal was sent plus
 * the lease time, on this process's monotonic clock. A process stopped for longer (SIGSTOP, a long
 * pause) stops serving the moment it wakes, before its next heartbeat says what it lost.
 */
export class Leases {
  private readonly held = new Map<number, Held>()
  private view: PartitionView[] = []
  private validUntilMs = 0
  private timer: ReturnType<typeof setTimeout> | undefined
  private beating: Promise<void> | undefined
  private stopped = false
  private liveMembers = 1
  private readonly loads = new Set<Promise<void>>()
  /** Where peers reach this server's internal listener (`host:port`), written with each heartbeat. */
  private address = ''

  constructor(
    private readonly sql: postgres.Sql,
    readonly options: LeaseOptions,
    private readonly hooks: LeaseHooks,
  ) {}

  /** Whether this server decides for the partition now: it serves it and its lease is current. */
  serves(partition: number): boolean {
    return this.held.get(partition)?.state === 'serving' && performance.now() < this.validUntilMs
  }

  /** The epoch this server holds the partition at (loading, serving or draining it), or undefined. */
  epochOf(partition: number): bigint | undefined {
    return this.held.get(partition)?.epoch
  }

  /** Who holds the partition as the last heartbeat saw it. */
  holderOf(partition: number): PartitionView | undefined {
    return this.view[partition]
  }

  /** Partitions held, by state (operators, tests). */
  summary(): { serving: number[]; loading: number[]; releasing: number[]; liveMembers: number } {
    const out = { serving: [] as number[], loading: [] as number[], releasing: [] as number[], liveMembers: this.liveMembers }
    for (const [partition, held] of [...this.held].sort((a, b) => a[0] - b[0])) out[held.state].push(partition)
    return out
  }

  /**
   * Announces `address` as this server's internal listener, takes its first partitions and loads
   * them (a server alone on its database serves from the moment it listens), then begins the heartbeat.
   */
  async start(address: string): Promise<void> {
    this.address = address
    await this.beat()
    await this.loaded()
    this.schedule(this.options.heartbeatMs)
  }

  /** Asks for a heartbeat now (a lease found stale while serving). */
  beatSoon(): void {
    if (this.beating === undefined && !this.stopped) this.schedule(0)
  }

  /**
   * One heartbeat, now (after any running). One that has not ended within the lease time is no
   * longer waited for (a connection black-holed): its leases have lapsed meanwhile, so nothing is
   * served until a later heartbeat renews them, and that one is not kept waiting behind it.
   */
  async beat(): Promise<void> {
    while (this.beating !== undefined) await this.beating
    let timer: ReturnType<typeof setTimeout> | undefined
    const abandoned = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.hooks.log(`cluster: a heartbeat took longer than the lease time (${this.options.ttlMs} ms); not waiting for it`)
        resolve()
      }, this.options.ttlMs)
    })
    this.beating = Promise.race([this.beatOnce(), abandoned]).finally(() => {
      clearTimeout(timer)
      this.beating = undefined
    })
    await this.beating
  }

  /**
   * Stops the heartbeat and gives every partition back after draining it, so that a peer takes
   * them at its next heartbeat instead of after the lease time.
   */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    while (this.beating !== undefined) await this.beating
    const partitions = [...this.held.keys()]
    for (const partition of partitions) this.held.get(partition)!.state = 'releasing'
    await this.release(partitions).catch((error) => this.hooks.log(`cluster: could not give back partitions at stop: ${(error as Error).message}`))
    await this.sql`delete from cluster_members where instance_id = ${this.options.instanceId}`.catch(() => {})
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timer = undefined
      void this.beat()
        .catch((error) => this.hooks.log(`cluster: heartbeat failed: ${(error as Error).message}`))
        .finally(() => this.schedule(this.options.heartbeatMs))
    }, delayMs)
    this.timer.unref?.()
  }

  private async beatOnce(): Promise<void> {
    if (this.stopped) return
    const { instanceId } = this.options
    const address = this.address
    const sentAt = performance.now()
    await this.sql`insert into cluster_members (instance_id, internal_address, heartbeat_at) values (${instanceId}, ${address}, now())
      on conflict (instance_id) do update set internal_address = excluded.internal_address, heartbeat_at = excluded.heartbeat_at`
    await this.renew(sentAt)
    await this.look()
    if (this.stopped) return
    // A release that failed (the database away) is tried again: those partitions are served by
    // nobody until it lands or their leases lapse.
    const stuck = [...this.held].filter(([, held]) => held.state === 'releasing').map(([partition]) => partition)
    if (stuck.length > 0) await this.release(stuck)
    const fairShare = Math.ceil(this.options.partitionCount / this.liveMembers)
    const owned = this.held.size
    if (owned < fairShare) await this.take(fairShare - owned)
    else if (owned > fairShare) await this.giveBack(owned - fairShare)
  }

  /** Renews every lease held; one that is not renewed (another server holds it now) is lost. */
  private async renew(sentAt: number): Promise<void> {
    if (this.held.size === 0) {
      this.validUntilMs = Math.max(this.validUntilMs, sentAt + this.options.ttlMs)
      return
    }
    const partitions = [...this.held.keys()]
    const rows = await this.sql<Array<{ partition: number; epoch: string }>>`
      update cluster_partitions set expires_at = now() + ${this.options.ttlMs} * interval '1 millisecond'
      where partition = any(${arrayLiteral(partitions)}::int[]) and holder = ${this.options.instanceId}
      returning partition, epoch::text as epoch`
    const renewed = new Map(rows.map((row) => [row.partition, BigInt(row.epoch)]))
    const lost: number[] = []
    for (const [partition, held] of this.held) if (renewed.get(partition) !== held.epoch) lost.push(partition)
    if (lost.length > 0) {
      for (const partition of lost) this.held.delete(partition)
      this.hooks.forget(lost)
      this.hooks.log(`cluster: lost partitions ${lost.join(', ')} (another server holds them now)`)
    }
    this.validUntilMs = Math.max(this.validUntilMs, sentAt + this.options.ttlMs)
  }

  /** Reads who holds what, and how many members are live. */
  private async look(): Promise<void> {
    const [count] = await this.sql<Array<{ members: number }>>`
      select count(*)::int as members from cluster_members where heartbeat_at > now() - ${this.options.ttlMs} * interval '1 millisecond'`
    this.liveMembers = Math.max(1, count?.members ?? 1)
    const rows = await this.sql<Array<{ partition: number; holder: string | null; live: boolean; address: string | null }>>`
      select p.partition, p.holder, p.holder is not null and p.expires_at > now() as live, m.internal_address as address
      from cluster_partitions p left join cluster_members m on m.instance_id = p.holder order by p.partition`
    const view: PartitionView[] = []
    for (const row of rows) view[row.partition] = { holder: row.holder, address: row.address, live: row.live }
    this.view = view
  }

  /**
   * Takes up to `wanted` partitions that nobody holds or whose lease has expired, each at its
   * epoch plus one, and serves them once their organizations are loaded. `skip locked`: two
   * servers taking at once take different partitions.
   */
  private async take(wanted: number): Promise<void> {
    const rows = await this.sql<Array<{ partition: number; epoch: string }>>`
      update cluster_partitions set holder = ${this.options.instanceId}, epoch = epoch + 1, expires_at = now() + ${this.options.ttlMs} * interval '1 millisecond'
      where partition in (
        select partition from cluster_partitions where holder is null or expires_at < now()
        order by partition limit ${wanted} for update skip locked)
      returning partition, epoch::text as epoch`
    if (rows.length === 0) return
    const partitions = rows.map((row) => row.partition).sort((a, b) => a - b)
    for (const row of rows) this.held.set(row.partition, { epoch: BigInt(row.epoch), state: 'loading' })
    this.hooks.log(`cluster: took partitions ${partitions.join(', ')}`)
    // Loaded beside the heartbeat, which keeps renewing their leases meanwhile.
    const loading = this.hooks
      .load(partitions)
      .then(() => {
        for (const row of rows) {
          const held = this.held.get(row.partition)
          if (held !== undefined && held.epoch === BigInt(row.epoch) && held.state === 'loading') held.state = 'serving'
        }
      })
      .catch((error) => {
        // Not served: given back so that another server (or this one, at a later heartbeat) loads them afresh.
        this.hooks.log(`cluster: could not load partitions ${partitions.join(', ')}: ${(error as Error).message}; giving them back`)
        for (const partition of partitions) {
          const held = this.held.get(partition)
          if (held !== undefined) held.state = 'releasing'
        }
        void this.release(partitions).catch(() => {})
      })
      .finally(() => this.loads.delete(loading))
    this.loads.add(loading)
  }

  /** Resolves once the partitions taken so far are loaded (or given back): a server starting waits for it before it listens. */
  async loaded(): Promise<void> {
    while (this.loads.size > 0) await Promise.all(this.loads)
  }

  /** Gives back the highest-numbered serving partitions over the fair share. */
  private async giveBack(count: number): Promise<void> {
    const serving = [...this.held].filter(([, held]) => held.state === 'serving').map(([partition]) => partition)
    const partitions = serving.sort((a, b) => b - a).slice(0, count)
    if (partitions.length === 0) return
    for (const partition of partitions) this.held.get(partition)!.state = 'releasing'
    this.hooks.log(`cluster: giving back partitions ${partitions.join(', ')} (${this.liveMembers} live members)`)
    await this.release(partitions)
  }

  /** Drains, releases and forgets partitions already marked releasing (no longer served). */
  private async release(partitions: readonly number[]): Promise<void> {
    if (partitions.length === 0) return
    await this.hooks.drain(partitions)
    const epochs = partitions.map((partition) => String(this.held.get(partition)?.epoch ?? -1n))
    await this.sql`
      update cluster_partitions p set holder = null, expires_at = '-infinity'
      from unnest(${arrayLiteral(partitions)}::int[], ${arrayLiteral(epochs)}::bigint[]) as r(partition, epoch)
      where p.partition = r.partition and p.holder = ${this.options.instanceId} and p.epoch = r.epoch`
    for (const partition of partitions) this.held.delete(partition)
    this.hooks.forget(partitions)
  }
}

/** A Postgres array literal of numbers (the connection does not fetch array types to serialize them). */
function arrayLiteral(values: ReadonlyArray<number | string>): string {
  return `{${values.join(',')}}`
}
