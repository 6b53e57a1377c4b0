export * from './platform.ts'
export * from './accounts.ts'
