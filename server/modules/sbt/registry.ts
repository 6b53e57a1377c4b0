/**
 * Every `labelType` this deployment knows, with the verifier family that checks it. One table:
 * the verify endpoint dispatches through it, the import validates credentials against it, the
 * farmable report reads `enforces` from it, and docs/sbt.md prints it. A value missing here is
 * undefined (an error at import and at verify); a value of the `platform_api` family is defined
 * but needs a social platform's API this deployment has no access to, and is refused at verify
 * with a clear error rather than passed.
 */
export type VerifierFamily =
  | 'click'
  | 'always'
  | 'wallet_bound'
  | 'account_named'
  | 'onchain'
  | 'sbt_holding'
  | 'invites'
  | 'points'
  | 'custom_api'
  | 'platform_api'

export type Chain = 'sui' | 'ton' | 'bsc'
export type Binding = 'ton' | 'evm' | 'sui' | 'bsc' | 'x' | 'discord'
export type Metric = 'points' | 'score' | 'streak'

export interface LabelTypeEntry {
  labelType: number
  task: string
  family: VerifierFamily
  /** The chain an on-chain check reads. */
  chain?: Chain
  /** The wallet or account a wallet/account check looks at. */
  binding?: Binding
  /** What a points check compares. */
  metric?: Metric
}

/** Families whose pass proves nothing the user could not fake by clicking: the farmable report lists them. */
export const NON_ENFORCING_FAMILIES: ReadonlySet<VerifierFamily> = new Set(['click', 'always', 'wallet_bound', 'account_named'])

export const LABEL_TYPE_MAX = 113

const entries: LabelTypeEntry[] = [
  { labelType: 1, task: 'Follow a microblogging account', family: 'platform_api' },
  { labelType: 2, task: 'Repost a microblogging post', family: 'platform_api' },
  { labelType: 3, task: 'Like a microblogging post', family: 'platform_api' },
  { labelType: 4, task: 'Quote a microblogging post', family: 'platform_api' },
  { labelType: 5, task: 'Reply to a microblogging post', family: 'platform_api' },
  { labelType: 6, task: 'Join a chat server', family: 'platform_api' },
  { labelType: 7, task: 'Hold a chat server role', family: 'platform_api' },
  { labelType: 8, task: 'Visit page', family: 'click' },
  { labelType: 9, task: 'Join a messaging-app group', family: 'platform_api' },
  { labelType: 10, task: 'Join a messaging-app channel', family: 'platform_api' },
  { labelType: 11, task: 'Post in a chat channel', family: 'platform_api' },
  { labelType: 12, task: 'Governance vote', family: 'click' },
  { labelType: 13, task: 'Attend a microblogging audio space', family: 'platform_api' },
  { labelType: 14, task: 'Microblogging account age', family: 'platform_api' },
  { labelType: 15, task: 'Microblogging follower count', family: 'platform_api' },
  { labelType: 16, task: 'Chat message count', family: 'platform_api' },
  { labelType: 17, task: 'Messaging-app premium account', family: 'platform_api' },
  { labelType: 18, task: 'Chat server member age', family: 'platform_api' },
  { labelType: 20, task: 'Open-trade task', family: 'always' },
  { labelType: 21, task: 'Messaging-app group message count', family: 'platform_api' },
  { labelType: 22, task: 'Microblogging post with hashtag', family: 'platform_api' },
  { labelType: 23, task: 'Connect TON wallet', family: 'wallet_bound', binding: 'ton' },
  { labelType: 24, task: 'Connect EVM wallet', family: 'wallet_bound', binding: 'evm' },
  { labelType: 25, task: 'Sui token balance', family: 'onchain', chain: 'sui' },
  { labelType: 26, task: 'Sui transaction count', family: 'onchain', chain: 'sui' },
  { labelType: 27, task: 'Sui NFT holding', family: 'onchain', chain: 'sui' },
  { labelType: 28, task: 'Sui staked amount', family: 'onchain', chain: 'sui' },
  { labelType: 29, task: 'Sui DeFi deposit (USD value)', family: 'onchain', chain: 'sui' },
  { labelType: 30, task: 'Sui contract interaction', family: 'onchain', chain: 'sui' },
  { labelType: 31, task: 'TON balance', family: 'onchain', chain: 'ton' },
  { labelType: 32, task: 'TON jetton balance', family: 'onchain', chain: 'ton' },
  { labelType: 33, task: 'TON transaction count', family: 'onchain', chain: 'ton' },
  { labelType: 34, task: 'TON NFT holding', family: 'onchain', chain: 'ton' },
  { labelType: 35, task: 'BSC BNB balance', family: 'onchain', chain: 'bsc' },
  { labelType: 36, task: 'BSC BEP-20 token balance', family: 'onchain', chain: 'bsc' },
  { labelType: 37, task: 'BSC transaction count', family: 'onchain', chain: 'bsc' },
  { labelType: 38, task: 'BSC NFT holding', family: 'onchain', chain: 'bsc' },
  { labelType: 39, task: 'BSC contract interaction', family: 'onchain', chain: 'bsc' },
  { labelType: 40, task: 'Issuer custom task (Verify API)', family: 'custom_api' },
  { labelType: 41, task: 'Hold an SBT', family: 'sbt_holding' },
  { labelType: 42, task: 'Hold a referral SBT', family: 'sbt_holding' },
  { labelType: 43, task: 'Hold a lockdrop SBT', family: 'sbt_holding' },
  { labelType: 44, task: 'Invite friends', family: 'invites' },
  { labelType: 45, task: 'Referral tier reached', family: 'invites' },
  { labelType: 46, task: 'Points total reached', family: 'points', metric: 'points' },
  { labelType: 47, task: 'Quiz score reached', family: 'points', metric: 'score' },
  { labelType: 48, task: 'Daily check-in streak', family: 'points', metric: 'streak' },
  { labelType: 49, task: 'Microblogging post impressions', family: 'platform_api' },
  { labelType: 50, task: 'Sui lockdrop deposit (USDC value)', family: 'onchain', chain: 'sui' },
  { labelType: 51, task: 'Sui liquidity provided', family: 'onchain', chain: 'sui' },
  { labelType: 52, task: 'Sui swap volume', family: 'onchain', chain: 'sui' },
  { labelType: 53, task: 'Sui bridge deposit', family: 'onchain', chain: 'sui' },
  { labelType: 54, task: 'TON staking amount', family: 'onchain', chain: 'ton' },
  { labelType: 55, task: 'TON swap volume', family: 'onchain', chain: 'ton' },
  { labelType: 56, task: 'BSC liquidity provided', family: 'onchain', chain: 'bsc' },
  { labelType: 57, task: 'BSC swap volume', family: 'onchain', chain: 'bsc' },
  { labelType: 58, task: 'BSC bridge deposit', family: 'onchain', chain: 'bsc' },
  { labelType: 60, task: 'Chat server boost', family: 'platform_api' },
  { labelType: 61, task: 'Messaging-app mini-app opened', family: 'platform_api' },
  { labelType: 62, task: 'Microblogging profile bio contains text', family: 'platform_api' },
  { labelType: 63, task: 'Microblogging display name contains text', family: 'platform_api' },
  { labelType: 64, task: 'Chat server invite count', family: 'platform_api' },
  { labelType: 65, task: 'Messaging-app channel boost', family: 'platform_api' },
  { labelType: 66, task: 'Invited friends completed a task', family: 'invites' },
  { labelType: 67, task: 'Weekly points reached', family: 'points', metric: 'points' },
  { labelType: 68, task: 'Leaderboard score reached', family: 'points', metric: 'score' },
  { labelType: 69, task: 'Weekly streak', family: 'points', metric: 'streak' },
  { labelType: 70, task: 'Microblogging community member', family: 'platform_api' },
  { labelType: 71, task: 'Microblogging list member', family: 'platform_api' },
  { labelType: 72, task: 'Share to story', family: 'click' },
  { labelType: 73, task: 'Connect microblogging account', family: 'account_named', binding: 'x' },
  { labelType: 74, task: 'Sui name service name owned', family: 'onchain', chain: 'sui' },
  { labelType: 75, task: 'Sui validator delegation', family: 'onchain', chain: 'sui' },
  { labelType: 76, task: 'Sui object owned of a type', family: 'onchain', chain: 'sui' },
  { labelType: 77, task: 'TON DNS name owned', family: 'onchain', chain: 'ton' },
  { labelType: 78, task: 'TON contract interaction', family: 'onchain', chain: 'ton' },
  { labelType: 79, task: 'BSC name service name owned', family: 'onchain', chain: 'bsc' },
  { labelType: 80, task: 'BSC staking amount', family: 'onchain', chain: 'bsc' },
  { labelType: 81, task: 'Messaging-app account age', family: 'platform_api' },
  { labelType: 82, task: 'Chat server role count', family: 'platform_api' },
  { labelType: 83, task: 'Microblogging verified account', family: 'platform_api' },
  { labelType: 84, task: 'Microblogging post view', family: 'platform_api' },
  { labelType: 85, task: 'Messaging-app story posted', family: 'platform_api' },
  { labelType: 86, task: 'Connect Sui wallet', family: 'wallet_bound', binding: 'sui' },
  { labelType: 87, task: 'Hold SBTs of a campaign', family: 'sbt_holding' },
  { labelType: 88, task: 'Invitees reached a level', family: 'invites' },
  { labelType: 89, task: 'Season points reached', family: 'points', metric: 'points' },
  { labelType: 90, task: 'Sui gas spent', family: 'onchain', chain: 'sui' },
  { labelType: 91, task: 'TON gas spent', family: 'onchain', chain: 'ton' },
  { labelType: 92, task: 'BSC gas spent', family: 'onchain', chain: 'bsc' },
  { labelType: 93, task: 'Chat server voice minutes', family: 'platform_api' },
  { labelType: 94, task: 'Connect chat account', family: 'account_named', binding: 'discord' },
  { labelType: 95, task: 'Microblogging mention of an account', family: 'platform_api' },
  { labelType: 96, task: 'Messaging-app reaction', family: 'platform_api' },
  { labelType: 97, task: 'Sui lending borrowed amount', family: 'onchain', chain: 'sui' },
  { labelType: 98, task: 'Sui perpetuals volume', family: 'onchain', chain: 'sui' },
  { labelType: 99, task: 'TON NFT collection count', family: 'onchain', chain: 'ton' },
  { labelType: 100, task: 'BSC lending borrowed amount', family: 'onchain', chain: 'bsc' },
  { labelType: 101, task: 'Quiz streak', family: 'points', metric: 'streak' },
  { labelType: 102, task: 'Connect BSC wallet', family: 'wallet_bound', binding: 'bsc' },
  { labelType: 103, task: 'Sui kiosk listing', family: 'onchain', chain: 'sui' },
  { labelType: 104, task: 'Sui token held for a period', family: 'onchain', chain: 'sui' },
  { labelType: 105, task: 'TON token held for a period', family: 'onchain', chain: 'ton' },
  { labelType: 106, task: 'BSC token held for a period', family: 'onchain', chain: 'bsc' },
  { labelType: 107, task: 'Invite friends who hold an SBT', family: 'invites' },
  { labelType: 108, task: 'Hold an SBT of a level', family: 'sbt_holding' },
  { labelType: 109, task: 'Score of a season reached', family: 'points', metric: 'score' },
  { labelType: 110, task: 'Chat server event attended', family: 'platform_api' },
  { labelType: 111, task: 'Messaging-app bot started', family: 'platform_api' },
  { labelType: 112, task: 'Microblogging space hosted', family: 'platform_api' },
  { labelType: 113, task: 'Issuer custom task, signed attestation (Verify API)', family: 'custom_api' },
]

export const LABEL_TYPES: ReadonlyMap<number, LabelTypeEntry> = new Map(entries.map((entry) => [entry.labelType, entry]))

export function labelTypeEntry(labelType: number): LabelTypeEntry | undefined {
  return LABEL_TYPES.get(labelType)
}
