import { providerOptions } from "../../store/provider-options.js";
import { hashSecret } from "../../store/secrets.js";
import type { KeyPoolSync, ProviderRow } from "../../store/types.js";
import type { Credential } from "../providers/provider.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";

const defaultCooldownMs = 30_000;

interface KeyState {
  secret: string;
  /** What other gateways know the key by: a short hash, never the secret. */
  fingerprint: string;
  coolingUntil: number;
  inFlight: number;
}

/** A provider key's name between gateways: enough to tell the keys of a pool apart, no more. */
export function keyFingerprint(secret: string): string {
  return hashSecret(secret).slice(0, 16);
}

/**
 * The provider's own API keys. A key that got 429 cools down; a key at the provider's
 * max_concurrency is busy. When no key is usable the attempt fails as `busy` with the time
 * until the first key frees up, which becomes the Retry-After of all_providers_failed.
 *
 * With a `sync` (several gateways on one database), a 429 cools the key on every gateway, and
 * max_concurrency becomes a per-gateway share: the limit divided by the live gateways, rounded
 * down, and one more for the first of them in the order of their ids while the remainder lasts,
 * so the shares add up to the limit exactly and together the gateways never exceed it. With more
 * gateways than the limit, the last ones' share is 0: their requests for the key are refused as
 * at capacity (503 all_providers_failed with Retry-After), or fall back to a route's next step.
 */
export class KeyPools {
  private readonly pools = new Map<
    string,
    { secrets: readonly string[]; keys: KeyState[]; next: number }
  >();
  /** Cooldowns heard from the other gateways, by provider and fingerprint: until when, locally. */
  private readonly shared = new Map<string, number>();

  constructor(
    private readonly now: () => number,
    private readonly sync?: KeyPoolSync,
  ) {
    sync?.onCooled((providerId, fingerprint, coolMs) =>
      this.coolShared(providerId, fingerprint, coolMs),
    );
  }

  acquire(provider: ProviderRow): Credential {
    const pool = this.poolFor(provider);
    if (pool.keys.length === 0) return { source: "none", secret: undefined, release: () => {} };
    const t = this.now();
    const limit = this.concurrencyLimit(provider);
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

  /** This gateway's share of the provider's max_concurrency per key. */
  private concurrencyLimit(provider: ProviderRow): number {
    const max = provider.max_concurrency;
    if (max === null) return Number.POSITIVE_INFINITY;
    if (!this.sync) return max;
    const live = Math.max(1, this.sync.liveInstances());
    return Math.floor(max / live) + (this.sync.liveBefore() < max % live ? 1 : 0);
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
          // At least the provider's cooldown_ms, and longer where the upstream asks for longer
          // (a Retry-After of 0 does not leave the key in use); with neither, the default.
          const configured = configuredCooldownMs(provider);
          const coolMs =
            configured === undefined
              ? (retryAfterMs ?? defaultCooldownMs)
              : Math.max(configured, retryAfterMs ?? 0);
          key.coolingUntil = this.now() + coolMs;
          this.sync?.cooled(provider.id, key.fingerprint, coolMs);
        }
      },
    };
  }

  /** Another gateway's 429 (or this one's, heard back): the key cools here too. */
  private coolShared(providerId: string, fingerprint: string, coolMs: number): void {
    const t = this.now();
    const until = t + coolMs;
    const id = sharedId(providerId, fingerprint);
    if (until > (this.shared.get(id) ?? 0)) this.shared.set(id, until);
    for (const [known, knownUntil] of this.shared) if (knownUntil <= t) this.shared.delete(known);
    for (const key of this.pools.get(providerId)?.keys ?? []) {
      if (key.fingerprint === fingerprint && key.coolingUntil < until) key.coolingUntil = until;
    }
  }

  private poolFor(provider: ProviderRow) {
    let pool = this.pools.get(provider.id);
    // A config re-apply may change the keys; rebuild the pool then, keeping nothing stale.
    if (!pool || pool.secrets !== provider.api_keys) {
      pool = {
        secrets: provider.api_keys,
        keys: provider.api_keys.map((secret) => {
          const fingerprint = keyFingerprint(secret);
          const coolingUntil = this.shared.get(sharedId(provider.id, fingerprint)) ?? 0;
          return { secret, fingerprint, coolingUntil, inFlight: 0 };
        }),
        next: 0,
      };
      this.pools.set(provider.id, pool);
    }
    return pool;
  }
}

function sharedId(providerId: string, fingerprint: string): string {
  return `${providerId}\u0000${fingerprint}`;
}

function configuredCooldownMs(provider: ProviderRow): number | undefined {
  return providerOptions(provider).cooldown_ms;
}
