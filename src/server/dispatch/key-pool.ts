import type { ProviderRow } from "../../store/types.js";
import type { Credential } from "../providers/types.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";

const defaultCooldownMs = 30_000;

interface KeyState {
  secret: string;
  coolingUntil: number;
  inFlight: number;
}

/**
 * The provider's own API keys. A key that got 429 cools down; a key at the provider's
 * max_concurrency is busy. When no key is usable the attempt fails as `busy` with the time
 * until the first key frees up, which becomes the Retry-After of all_providers_failed.
 */
export class KeyPools {
  private readonly pools = new Map<
    string,
    { secrets: readonly string[]; keys: KeyState[]; next: number }
  >();

  constructor(private readonly now: () => number) {}

  acquire(provider: ProviderRow): Credential {
    const pool = this.poolFor(provider);
    if (pool.keys.length === 0) return { source: "none", secret: undefined, release: () => {} };
    const t = this.now();
    const limit = provider.max_concurrency ?? Number.POSITIVE_INFINITY;
    for (let i = 0; i < pool.keys.length; i++) {
      const key = pool.keys[(pool.next + i) % pool.keys.length];
      if (key.coolingUntil > t || key.inFlight >= limit) continue;
      pool.next = (pool.next + i + 1) % pool.keys.length;
      key.inFlight++;
      return this.credentialFor(key, provider);
    }
    const coolest = Math.min(
      ...pool.keys.map((k) => (k.coolingUntil > t ? k.coolingUntil - t : 1000)),
    );
    throw new UpstreamFailure("busy", 503, "upstream_rejected", Math.max(1000, coolest));
  }

  private credentialFor(key: KeyState, provider: ProviderRow): Credential {
    let released = false;
    return {
      source: "pool",
      secret: key.secret,
      release: (outcome, retryAfterMs) => {
        if (released) return;
        released = true;
        key.inFlight--;
        if (outcome === "rate_limited") {
          key.coolingUntil = this.now() + (retryAfterMs ?? cooldownMs(provider));
        }
      },
    };
  }

  private poolFor(provider: ProviderRow) {
    let pool = this.pools.get(provider.id);
    // A config re-apply may change the keys; rebuild the pool then, keeping nothing stale.
    if (!pool || pool.secrets !== provider.api_keys) {
      pool = {
        secrets: provider.api_keys,
        keys: provider.api_keys.map((secret) => ({ secret, coolingUntil: 0, inFlight: 0 })),
        next: 0,
      };
      this.pools.set(provider.id, pool);
    }
    return pool;
  }
}

function cooldownMs(provider: ProviderRow): number {
  const options = JSON.parse(provider.options_json) as { cooldown_ms?: number };
  return options.cooldown_ms ?? defaultCooldownMs;
}
