import { describe, expect, test } from 'bun:test'
import { ed25519 } from '@noble/curves/ed25519.js'
import { hexToBytes } from '@noble/hashes/utils.js'
import { base64 } from '@scure/base'
import { ApiError } from '../../server/lib/errors.ts'
import { isValidAddress, parseAddress, tronBase58check } from '../../server/modules/chain/addresses.ts'
import { AddressDeriver, addressOfPrivateKey, suiAddressOfPublicKey, tronAddressOfPublicKey } from '../../server/modules/chain/derivation.ts'
import { parseTxHash, simulatedTxHash } from '../../server/modules/chain/networks.ts'
import { SANDBOX_DEPOSIT_KEY_SEED_HEX } from '../../server/config.ts'

const BASE58_ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'

/** Real Tron mainnet addresses: the TRON docs' private-net witness and Tether's USDT contract. */
const TRON_VALID = ['TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZY', 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t']
const SUI_VALID = [
  '0xd77a6cd55073e98d4029b1b0b8bd8d88f45f343dad2732fc9a7965094e635c55',
  '0xdba34672e30cb065b1f93e3ab55318768fd6fef66c15942c9f7cb846e2f900e7',
  `0x${'0'.repeat(63)}2`,
]

function refusal(run: () => unknown): ApiError {
  try {
    run()
  } catch (error) {
    expect(error).toBeInstanceOf(ApiError)
    return error as ApiError
  }
  throw new Error('expected a refusal')
}

describe('Sui addresses', () => {
  for (const address of SUI_VALID) {
    test(`accepts ${address.slice(0, 14)}…`, () => {
      expect(parseAddress('sui', address)).toBe(address)
      expect(isValidAddress('sui', address)).toBe(true)
    })
  }

  test('canonical form is lowercase', () => {
    expect(parseAddress('sui', SUI_VALID[0]!.toUpperCase().replace('0X', '0x'))).toBe(SUI_VALID[0]!)
  })

  const invalid: Array<[string, string]> = [
    ['the short form 0x2', '0x2'],
    ['63 hex digits', `0x${'a'.repeat(63)}`],
    ['65 hex digits', `0x${'a'.repeat(65)}`],
    ['no 0x prefix', 'a'.repeat(64)],
    ['an uppercase 0X prefix', `0X${'a'.repeat(64)}`],
    ['a non-hex digit', `0x${'a'.repeat(63)}g`],
    ['surrounding spaces', ` ${SUI_VALID[0]} `],
    ['the empty string', ''],
    ['a Tron address', TRON_VALID[0]!],
  ]
  for (const [name, address] of invalid) {
    test(`refuses ${name}, naming the field`, () => {
      const error = refusal(() => parseAddress('sui', address, 'destination'))
      expect({ code: error.code, field: error.field }).toEqual({ code: 'invalid_request', field: 'destination' })
      expect(isValidAddress('sui', address)).toBe(false)
    })
  }
})

describe('Tron addresses', () => {
  for (const address of TRON_VALID) {
    test(`accepts ${address}`, () => {
      expect(parseAddress('tron', address)).toBe(address)
      const bytes = tronBase58check.decode(address)
      expect(bytes.length).toBe(21)
      expect(bytes[0]).toBe(0x41)
    })

    test(`refuses every one-character change of ${address}`, () => {
      let changes = 0
      for (let position = 0; position < address.length; position++) {
        for (const replacement of BASE58_ALPHABET) {
          if (replacement === address[position]) continue
          const changed = address.slice(0, position) + replacement + address.slice(position + 1)
          expect(isValidAddress('tron', changed)).toBe(false)
          changes += 1
        }
      }
      expect(changes).toBe(address.length * (BASE58_ALPHABET.length - 1))
    })
  }

  const twentyBytes = hexToBytes('928c9af0651632157ef27a2cf17ca72c575a4d21')
  const invalid: Array<[string, string]> = [
    ['a valid base58check with version byte 0x00', tronBase58check.encode(Uint8Array.from([0x00, ...twentyBytes]))],
    ['a valid base58check with version byte 0xa0 (the old testnet)', tronBase58check.encode(Uint8Array.from([0xa0, ...twentyBytes]))],
    ['a valid base58check of 20 bytes', tronBase58check.encode(Uint8Array.from([0x41, ...twentyBytes.slice(1)]))],
    ['a valid base58check of 22 bytes', tronBase58check.encode(Uint8Array.from([0x41, ...twentyBytes, 0x00]))],
    ['the hex form', '41928c9af0651632157ef27a2cf17ca72c575a4d21'],
    ['a character outside base58 (0)', 'TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZ0'],
    ['a character outside base58 (l)', 'TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZl'],
    ['a dropped character', TRON_VALID[0]!.slice(0, -1)],
    ['an added character', `${TRON_VALID[0]}1`],
    ['two characters swapped', 'TPL66VK2gCXNCD7EJg9pgJRfqcRazjhZUY'],
    ['lowercase', TRON_VALID[0]!.toLowerCase()],
    ['the empty string', ''],
    ['a Sui address', SUI_VALID[0]!],
  ]
  for (const [name, address] of invalid) {
    test(`refuses ${name}, naming the field`, () => {
      const error = refusal(() => parseAddress('tron', address, 'address'))
      expect({ code: error.code, field: error.field }).toEqual({ code: 'invalid_request', field: 'address' })
    })
  }
})

describe('address derivation', () => {
  test('a known Tron private key gives its known address (TRON docs: private-net witness)', () => {
    const privateKey = hexToBytes('da146374a75310b9666e834ee4ad0866d6f4035967bfc76217c5a495fff9f0d0')
    expect(addressOfPrivateKey('tron', privateKey)).toBe('TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZY')
  })

  test('a known Ed25519 public key gives its Sui address (Mysten SDK vector generated with the Sui CLI)', () => {
    expect(suiAddressOfPublicKey(base64.decode('UdGRWooy48vGTs0HBokIis5NK+DUjiWc9ENUlcfCCBE='))).toBe('0xd77a6cd55073e98d4029b1b0b8bd8d88f45f343dad2732fc9a7965094e635c55')
  })

  test('a Sui private key derives through its own public key', () => {
    const privateKey = hexToBytes('11'.repeat(32))
    expect(addressOfPrivateKey('sui', privateKey)).toBe(suiAddressOfPublicKey(ed25519.getPublicKey(privateKey)))
  })

  test('refuses malformed public keys as programmer errors', () => {
    expect(() => suiAddressOfPublicKey(new Uint8Array(31))).toThrow()
    expect(() => tronAddressOfPublicKey(new Uint8Array(33))).toThrow()
  })

  const deriver = new AddressDeriver(hexToBytes(SANDBOX_DEPOSIT_KEY_SEED_HEX))
  const path = { orgId: 'org_1', accountId: 'acct_1', asset: 'USDC', network: 'sui' as const, index: 0 }

  test('is deterministic: the same seed and path give the same address, another seed another', () => {
    expect(deriver.depositAddress(path)).toBe(new AddressDeriver(hexToBytes(SANDBOX_DEPOSIT_KEY_SEED_HEX)).depositAddress(path))
    expect(new AddressDeriver(hexToBytes('ab'.repeat(32))).depositAddress(path)).not.toBe(deriver.depositAddress(path))
  })

  test('every part of the path gives a different address', () => {
    const addresses = new Set([
      deriver.depositAddress(path),
      deriver.depositAddress({ ...path, index: 1 }),
      deriver.depositAddress({ ...path, accountId: 'acct_2' }),
      deriver.depositAddress({ ...path, orgId: 'org_2' }),
      deriver.depositAddress({ ...path, asset: 'USDT' }),
    ])
    expect(addresses.size).toBe(5)
  })

  test('every derived address passes the strict parser of its network', () => {
    for (const network of ['sui', 'tron'] as const) {
      for (let index = 0; index < 40; index++) {
        const address = deriver.depositAddress({ orgId: `org_${index % 3}`, accountId: `acct_${index}`, asset: network === 'sui' ? 'USDC' : 'USDT', network, index })
        expect(parseAddress(network, address)).toBe(address)
      }
      expect(parseAddress(network, deriver.hotWalletAddress('org_1', network))).toBeString()
    }
  })

  test('refuses a seed shorter than 32 bytes', () => {
    expect(() => new AddressDeriver(new Uint8Array(31))).toThrow()
  })
})

describe('transaction hashes', () => {
  test('Tron: 64 hex digits, lowercased', () => {
    expect(parseTxHash('tron', 'AB'.repeat(32))).toBe('ab'.repeat(32))
    for (const bad of ['ab'.repeat(31), 'ab'.repeat(33), 'zz'.repeat(32), `0x${'ab'.repeat(32)}`]) {
      expect(refusal(() => parseTxHash('tron', bad)).field).toBe('txHash')
    }
  })

  test('Sui: base58 of 32 bytes', () => {
    const digest = simulatedTxHash('sui', 'example')
    expect(parseTxHash('sui', digest)).toBe(digest)
    for (const bad of ['ab'.repeat(32), digest.slice(0, -4), `${digest}0`, '']) {
      expect(refusal(() => parseTxHash('sui', bad)).field).toBe('txHash')
    }
  })
})
