import { Elysia } from 'elysia'
import type { Gate } from './forward.ts'

/**
 * The cluster's gate as the app's first step (before arrival, authentication and rate limits): a
 * request it answers (forwarded to its organization's owner, or refused while nobody serves it)
 * never reaches the app here. Without a cluster it adds nothing.
 */
export function clusterGatePlugin(gate: Gate | undefined) {
  const plugin = new Elysia({ name: 'kassa/cluster-gate' })
  if (gate === undefined) return plugin
  return plugin.onRequest(({ request }) => gate(request))
}

/**
 * The authorization front (`server/modules/payments/front.ts`) behind the gate: Bun's router sends
 * authorizations to the front before Elysia, so the gate is put in front of it too.
 */
type Handler = (request: Request) => Response | Promise<Response>
export interface Front {
  routes: Record<string, { POST: Handler }>
  handle: Handler
}

export function gatedFront(front: Front, gate: Gate | undefined): Front {
  if (gate === undefined) return front
  const through =
    (next: (request: Request) => Response | Promise<Response>) =>
    (request: Request): Response | Promise<Response> => {
      const answer = gate(request)
      if (answer === undefined) return next(request)
      if (answer instanceof Response) return answer
      return answer.then((settled) => settled ?? next(request))
    }
  const routes: Record<string, { POST: (request: Request) => Response | Promise<Response> }> = {}
  for (const [path, methods] of Object.entries(front.routes)) routes[path] = { POST: through(methods.POST) }
  return { routes, handle: through(front.handle) }
}
