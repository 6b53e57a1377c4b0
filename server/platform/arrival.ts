import { Elysia } from 'elysia'
import { requestSlot } from './request-slot.ts'

const arrivals = requestSlot<number>('kassa.arrivedAt')

/**
 * When each request arrived (`performance.now()`), recorded before any other hook runs, so a
 * budget promised to the caller (an authorization's 500 ms) counts the time spent in rate
 * limiting, authentication and parsing too.
 */
export function arrivalPlugin() {
  return new Elysia({ name: 'kassa/arrival' }).onRequest(({ request }) => {
    arrivals.set(request, performance.now())
  })
}

/** The request's arrival time; now, for a request that did not pass through the plugin. */
export function arrivalOf(request: Request): number {
  return arrivals.get(request) ?? performance.now()
}
