import { describe, expect, test } from 'bun:test'
import { join } from 'node:path'
import { forbiddenImports, importCycles, readImportGraph, type ImportGraph } from '../support/import-graph.ts'

const root = join(import.meta.dir, '..', '..')
const graph = readImportGraph(root, ['server', 'db'])

describe('the import graph', () => {
  test('has no cycle, type-only imports included', () => {
    expect(importCycles(graph)).toEqual([])
  })

  test('server/ledger/ imports no module and not the runtime', () => {
    expect(forbiddenImports(graph, 'server/ledger/', ['server/modules/', 'server/runtime.ts', 'server/app.ts'])).toEqual([])
  })

  test('server/platform/ imports no module and not the runtime', () => {
    expect(forbiddenImports(graph, 'server/platform/', ['server/modules/', 'server/runtime.ts', 'server/app.ts'])).toEqual([])
  })

  test('server/lib/ and db/ import nothing of the server above them', () => {
    const above = ['server/modules/', 'server/ledger/', 'server/platform/', 'server/runtime.ts', 'server/app.ts']
    expect(forbiddenImports(graph, 'server/lib/', above)).toEqual([])
    expect(forbiddenImports(graph, 'db/', above)).toEqual([])
  })
})

describe('the cycle finder itself', () => {
  const graphOf = (edges: Record<string, string[]>): ImportGraph => ({ files: Object.keys(edges).sort(), edges: new Map(Object.entries(edges)) })

  test('finds a loop through three files and leaves a chain alone', () => {
    expect(importCycles(graphOf({ a: ['b'], b: ['c'], c: ['a'], d: ['a'] }))).toEqual([['a', 'b', 'c']])
    expect(importCycles(graphOf({ a: ['b'], b: ['c'], c: [] }))).toEqual([])
  })

  test('finds a file that imports itself', () => {
    expect(importCycles(graphOf({ a: ['a'] }))).toEqual([['a']])
  })

  test('reads type-only and multi-line imports from real source', () => {
    const edges = graph.edges.get('server/app.ts') ?? []
    expect(edges).toContain('server/config.ts')
  })
})
