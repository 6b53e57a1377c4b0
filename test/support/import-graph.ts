import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

/**
 * The project's import graph read from the source text, type-only imports included (a type import
 * ties two files as surely as a value import: the reader must understand both together). Only
 * relative imports count; packages are leaves.
 */
export interface ImportGraph {
  /** Project-relative path of every file read. */
  files: string[]
  /** For each file, the project-relative files it imports. */
  edges: Map<string, string[]>
}

const SOURCE = /\.(ts|tsx)$/
// `import … from '…'`, `export … from '…'`, `import '…'` and `import('…')`, across lines.
const SPECIFIERS = [/\b(?:import|export)\s[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/g, /\bimport\s*['"]([^'"]+)['"]/g, /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g]

function sourceFiles(root: string, folder: string): string[] {
  const found: string[] = []
  const walk = (path: string) => {
    for (const name of readdirSync(path)) {
      if (name === 'node_modules' || name.startsWith('.')) continue
      const full = join(path, name)
      if (statSync(full).isDirectory()) walk(full)
      else if (SOURCE.test(name)) found.push(relative(root, full))
    }
  }
  walk(join(root, folder))
  return found
}

/** Strips comments so that an import named in prose is not read as one. */
function withoutComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1')
}

export function readImportGraph(root: string, folders: string[]): ImportGraph {
  const files = folders.flatMap((folder) => sourceFiles(root, folder)).sort()
  const known = new Set(files)
  const edges = new Map<string, string[]>()
  for (const file of files) {
    const text = withoutComments(readFileSync(join(root, file), 'utf8'))
    const targets = new Set<string>()
    for (const pattern of SPECIFIERS) {
      for (const match of text.matchAll(pattern)) {
        const specifier = match[1]!
        if (!specifier.startsWith('.')) continue
        const target = relative(root, resolve(root, dirname(file), specifier))
        for (const candidate of [target, `${target}.ts`, `${target}.tsx`, join(target, 'index.ts')]) {
          if (known.has(candidate)) {
            targets.add(candidate)
            break
          }
        }
      }
    }
    edges.set(file, [...targets].sort())
  }
  return { files, edges }
}

/** Every strongly connected group of more than one file (or a file importing itself), each sorted. */
export function importCycles(graph: ImportGraph): string[][] {
  // Tarjan's algorithm, iterative so a deep graph cannot overflow the stack.
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const onStack = new Set<string>()
  const stack: string[] = []
  const cycles: string[][] = []
  for (const start of graph.files) {
    if (index.has(start)) continue
    const work: Array<{ node: string; next: number }> = [{ node: start, next: 0 }]
    index.set(start, counter)
    low.set(start, counter++)
    stack.push(start)
    onStack.add(start)
    while (work.length > 0) {
      const frame = work[work.length - 1]!
      const targets = graph.edges.get(frame.node) ?? []
      if (frame.next < targets.length) {
        const target = targets[frame.next++]!
        if (!index.has(target)) {
          index.set(target, counter)
          low.set(target, counter++)
          stack.push(target)
          onStack.add(target)
          work.push({ node: target, next: 0 })
        } else if (onStack.has(target)) {
          low.set(frame.node, Math.min(low.get(frame.node)!, index.get(target)!))
        }
        continue
      }
      work.pop()
      const parent = work[work.length - 1]
      if (parent) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(frame.node)!))
      if (low.get(frame.node) === index.get(frame.node)) {
        const group: string[] = []
        let member: string
        do {
          member = stack.pop()!
          onStack.delete(member)
          group.push(member)
        } while (member !== frame.node)
        const selfImport = (graph.edges.get(frame.node) ?? []).includes(frame.node)
        if (group.length > 1 || selfImport) cycles.push(group.sort())
      }
    }
  }
  return cycles
}

/** The imports that break a layering rule: a file under `from` importing a file under `forbidden`. */
export function forbiddenImports(graph: ImportGraph, from: string, forbidden: string[]): string[] {
  const found: string[] = []
  for (const [file, targets] of graph.edges) {
    if (!file.startsWith(from)) continue
    for (const target of targets) if (forbidden.some((prefix) => target.startsWith(prefix))) found.push(`${file} -> ${target}`)
  }
  return found
}
