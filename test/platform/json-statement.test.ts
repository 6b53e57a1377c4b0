import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { jsonParameter, jsonStatement, StatementTexts, statementWith } from '../../db/bulk.ts'
import { queryText, type DatabaseHandle } from '../../db/client.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'

let database: TestDatabase
let handle: DatabaseHandle

beforeAll(async () => {
  database = await createTestDatabase()
  handle = await database.open()
})
afterAll(async () => {
  await handle.close()
  await database.drop()
})

describe('jsonStatement', () => {
  test('a parameter read by two parts is sent once, numbered in order of first use', () => {
    const statement = jsonStatement(`select ${jsonParameter('b')}, ${jsonParameter('a')}, ${jsonParameter('b')}`, { a: [1], b: { x: 'y' } })
    expect(statement.text).toBe('select $1::jsonb, $2::jsonb, $1::jsonb')
    expect(statement.params).toEqual(['{"x":"y"}', '[1]'])
  })

  test('values travel as parameters, never in the text: the same text serves other values', () => {
    const marked = `select ${jsonParameter('rows')} as rows`
    const first = jsonStatement(marked, { rows: [{ note: "it's $1" }] })
    const second = jsonStatement(marked, { rows: [] })
    expect(first.text).toBe(second.text)
    expect(first.text).not.toContain('note')
    expect(first.params).toEqual([JSON.stringify([{ note: "it's $1" }])])
  })

  test('a parameter the statement reads but was not given is refused before anything is sent', () => {
    expect(() => jsonStatement(`select ${jsonParameter('missing')}`, {})).toThrow('the statement reads a parameter missing it was not given')
  })

  test('runs on the database with its parameters, and again with other values on the same text', async () => {
    const marked = `select r.name, r.n::text as n, (select count(*) from jsonb_array_elements(${jsonParameter('rows')}))::text as count
      from jsonb_to_recordset(${jsonParameter('rows')}) as r(name text, n integer) order by r.n`
    const first = await queryText<{ name: string; n: string; count: string }>(handle.db, jsonStatement(marked, { rows: [{ name: "O'Brien", n: 2 }, { name: 'Ada', n: 1 }] }))
    expect(first).toEqual([
      { name: 'Ada', n: '1', count: '2' },
      { name: "O'Brien", n: '2', count: '2' },
    ])
    const second = await queryText<{ name: string; n: string; count: string }>(handle.db, jsonStatement(marked, { rows: [{ name: '$1', n: 7 }] }))
    expect(second).toEqual([{ name: '$1', n: '7', count: '1' }])
  })

  test('runs inside a transaction', async () => {
    const rows = await handle.db.transaction(async (tx) => queryText<{ total: string }>(tx, jsonStatement(`select sum(value::int)::text as total from jsonb_array_elements_text(${jsonParameter('values')}) as value`, { values: [1, 2, 3] })))
    expect(rows).toEqual([{ total: '6' }])
  })
})

describe('StatementTexts', () => {
  test('a key is assembled and numbered once; its text then serves every statement with that key', () => {
    const texts = new StatementTexts()
    const part = `rows as (select * from jsonb_to_recordset(${jsonParameter('rows')}) as r(n integer))`
    let assembled = 0
    const assemble = () => {
      assembled += 1
      return `with ${part} select ${jsonParameter('input')}, n from rows`
    }
    const first = texts.numbered(['unfiltered', part], assemble)
    const second = texts.numbered(['unfiltered', part], assemble)
    expect(assembled).toBe(1)
    expect(second).toBe(first)
    expect(statementWith(first, { rows: [{ n: 1 }], input: { seq: 2 } })).toEqual(jsonStatement(assemble(), { rows: [{ n: 1 }], input: { seq: 2 } }))
  })

  test('keys that differ in any piece, or only in their length, are told apart', () => {
    const texts = new StatementTexts()
    const a = texts.numbered(['x'], () => `select ${jsonParameter('a')}`)
    const ab = texts.numbered(['x', 'y'], () => `select ${jsonParameter('a')}, ${jsonParameter('b')}`)
    const b = texts.numbered(['y'], () => `select ${jsonParameter('b')}, ${jsonParameter('a')}`)
    expect(a.text).toBe('select $1::jsonb')
    expect(ab.names).toEqual(['a', 'b'])
    expect(b.names).toEqual(['b', 'a'])
    expect(texts.numbered(['x'], () => 'not assembled again')).toBe(a)
  })
})
