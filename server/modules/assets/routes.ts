import { Elysia, t } from 'elysia'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { ASSETS } from '../../lib/assets.ts'

const Asset = t.Object(
  {
    asset: t.String({ examples: ['USDC'] }),
    network: t.String({ examples: ['sui'] }),
    decimals: t.Integer(),
    name: t.String(),
    confirmations: t.Integer({ description: 'Confirmations after which an arrival is final' }),
  },
  { title: 'Asset' },
)

export function assetsRoutes(access: AccessPlugin) {
  return new Elysia({ name: 'kassa/assets', prefix: '/v1' }).use(access).get('/assets', () => ({ assets: ASSETS.map((asset) => ({ ...asset })) }), {
    access: 'public',
    response: t.Object({ assets: t.Array(Asset) }),
    detail: apiDoc('Asset catalog', 'Catalog', {
      security: 'public',
      description: 'Readable without a key. Amounts everywhere are decimal strings with at most `decimals` places.',
    }),
  })
}
