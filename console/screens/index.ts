import { cyclesScreen } from './cycles.tsx'
import { eventsScreen } from './events.tsx'
import type { ScreenDefinition } from './types.ts'
import { vaultsScreen } from './vaults.tsx'
import { withdrawalsScreen } from './withdrawals.tsx'

/** The console's tabs, in order; a tab's number is its key. A new screen is one line here. */
export const SCREENS: readonly ScreenDefinition[] = [withdrawalsScreen, eventsScreen, vaultsScreen, cyclesScreen]
