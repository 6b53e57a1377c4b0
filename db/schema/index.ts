export * from './platform.ts'
export * from './accounts.ts'
export * from './ledger.ts'
export * from './payments.ts'
