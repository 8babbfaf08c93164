/**
 * Verified-token cache keyed by the token itself. It only saves re-checking a signature: the
 * cached value is what `verifyToken` returned for the same bytes under the same ring, so it can
 * never change a decision (revocation, expiry and budgets are checked on every call).
 */
import type { KeyRing } from '../crypto/keys.js';
import { verifyToken, type VerifyResult } from '../crypto/tokens.js';

export class TokenCache {
  private readonly entries = new Map<string, VerifyResult>();

  constructor(
    private readonly ring: KeyRing,
    private readonly capacity = 10_000,
  ) {}

  async verify(token: string): Promise<VerifyResult> {
    // The token string is the key (bounded at 8 KiB by the schema): hashing it would cost more than the lookup saves.
    const key = token;
    const hit = this.entries.get(key);
    if (hit !== undefined) return hit;
    const result = await verifyToken(this.ring, token);
    // Only successes are kept: a flood of garbage tokens cannot push out the live ones.
    if (result.ok) {
      if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value as string);
      this.entries.set(key, result);
    }
    return result;
  }
}
