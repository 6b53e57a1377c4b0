import { describe, expect, test } from 'bun:test'
import { availableParallelism } from 'node:os'
import { cpuPerOperation, type CpuSnapshot } from '../../bench/support.ts'

function snapshot(postgres: Record<string, number>, postgresWait: Record<string, number> = {}): CpuSnapshot {
  return {
    generatorMs: 0,
    serverMs: 0,
    serverMainMs: 0,
    serverMinorFaults: 0,
    postgresMsByPid: new Map(Object.entries(postgres)),
    machineBusyMs: 0,
    machineAllMs: 0,
    machineStolenMs: 0,
    generatorMainWaitMs: 0,
    serverMainWaitMs: 0,
    postgresWaitMsByPid: new Map(Object.entries(postgresWait)),
  }
}

describe("the benchmarks' Postgres CPU per answer", () => {
  test("sums each process's growth: a backend that ended during the run is left out, one that started counts from its start", () => {
    // 100: the postmaster, 200: a backend of the previous server that closed during the run (it had
    // used 900 ms, which a difference of sums would have taken off), 300: a backend that grew by 40,
    // 400: a backend opened during the run (25 ms, all of it in the run).
    const before = snapshot({ '100': 50, '200': 900, '300': 10 })
    const after = snapshot({ '100': 60, '300': 50, '400': 25 })
    expect(cpuPerOperation(before, after, 1000).postgresUs).toBe(75)
  })

  test('a process id reused by a process with less CPU than the one before it adds nothing, never less than nothing', () => {
    expect(cpuPerOperation(snapshot({ '300': 500 }), snapshot({ '300': 20 }), 10).postgresUs).toBe(0)
  })
})

describe("the benchmarks' Postgres run-queue wait", () => {
  test("sums each process's growth too: a backend that ended during the run does not lower it", () => {
    // One second of wall time on every core; the same processes as above, their waits in ms.
    const before = { ...snapshot({}, { '100': 50, '200': 900, '300': 10 }), machineAllMs: 0 }
    const after = { ...snapshot({}, { '100': 60, '300': 50, '400': 25 }), machineAllMs: 1000 * availableParallelism() }
    expect(cpuPerOperation(before, after, 1000).postgresWaitPercent).toBe(7.5)
  })
})

describe("the benchmarks' server page faults per answer", () => {
  test("are the server's minor faults over the run divided by its answers", () => {
    const before = { ...snapshot({}), serverMinorFaults: 1_000 }
    const after = { ...snapshot({}), serverMinorFaults: 1_000 + 4_260 }
    expect(cpuPerOperation(before, after, 10_000).serverFaultsPerAnswer).toBe(0.43)
    expect(cpuPerOperation(before, after, 0).serverFaultsPerAnswer).toBe(0)
  })
})

describe("the benchmarks' busiest Postgres process", () => {
  test('is the one process that grew most over the run, per answer and as a share of all of Postgres', () => {
    // 300 grew by 90 (the writer's backend), 100 by 10, 400 started during the run with 0; 200 left.
    const before = snapshot({ '100': 50, '200': 900, '300': 10 })
    const after = snapshot({ '100': 60, '300': 100, '400': 0 })
    const figures = cpuPerOperation(before, after, 1000)
    expect(figures.postgresUs).toBe(100)
    expect(figures.postgresBusiestUs).toBe(90)
    expect(figures.postgresBusiestPercent).toBe(90)
  })

  test('is zero, not a division by zero, when Postgres did nothing', () => {
    const figures = cpuPerOperation(snapshot({ '100': 5 }), snapshot({ '100': 5 }), 10)
    expect(figures.postgresBusiestUs).toBe(0)
    expect(figures.postgresBusiestPercent).toBe(0)
  })
})
