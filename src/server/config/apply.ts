import { createHash } from "node:crypto";
import type { ConfigAccount, ConfigApplyRepository } from "../../store/config-apply.js";
import { idrToMicro } from "../../store/money.js";
import { hashSecret, keyPrefix } from "../../store/secrets.js";
import type { GatewayStore } from "../../store/types.js";
import { ConfigError } from "./load.js";
import { builtInTiers, type GatewayConfig } from "./schema.js";

/**
 * Upserts everything the config declares, in one transaction, except provider API keys, which the
 * store keeps in memory only (so a start needs its config again to reach keyed providers); a
 * base URL that carries a credential is stored sealed. Applying the same file twice
 * leaves the database as applying it once. An account whose config section is unchanged since
 * the last apply is left alone, so a restart does not reset balances spent since.
 */
export async function applyConfig(
  store: GatewayStore,
  configApply: ConfigApplyRepository,
  config: GatewayConfig,
  now = Date.now(),
  source?: string,
): Promise<void> {
  await refuseKeysHeldElsewhere(store, config, source);
  const tiers = Object.entries({ ...builtInTiers, ...config.tiers }).map(([name, t]) => ({
    name,
    rank: t.rank,
    free_rpm: t.free_rpm,
    free_daily: t.free_daily,
    burst_spacing_ms: t.burst_spacing_ms,
    burst_queue: t.burst_queue,
    min_topup_micro: t.min_topup_idr === undefined ? null : idrToMicro(t.min_topup_idr),
  }));
  const providers = config.providers.map((p) => ({
    id: p.id,
    wire: p.wire,
    ...store.baseUrlColumns(p.id, p.base_url ?? null),
    api_key_count: p.api_keys.length,
    timeout_ms: p.timeout_ms,
    max_concurrency: p.max_concurrency ?? null,
    options_json: JSON.stringify({
      mock: p.mock ?? {},
      cooldown_ms: p.cooldown_ms,
      unsupported_tools: p.unsupported_tools,
      max_tokens_field: p.max_tokens_field,
      prompt_cache_breakpoints: p.prompt_cache_breakpoints,
      idle_timeout_ms: p.idle_timeout_ms,
      max_stream_ms: p.max_stream_ms,
      max_event_bytes: p.max_event_bytes,
      completions_native: p.completions_native,
      stream_usage: p.stream_usage,
    }),
    responses_native: p.responses_native ? 1 : 0,
  }));
  const models = config.models.map((m) => ({
    name: m.name,
    provider_id: m.provider,
    upstream_model: m.upstream_model ?? m.name,
    modality: m.modality,
    price_input_per_mtok: m.price_input_per_mtok,
    price_output_per_mtok: m.price_output_per_mtok,
    price_per_request: idrToMicro(m.price_per_request),
    price_per_unit: idrToMicro(m.price_per_unit),
    subscribers_only: m.subscribers_only ? 1 : 0,
    context_window: m.context_window,
    max_output_tokens: m.max_output_tokens,
    free_token_budget: m.free_token_budget?.tokens ?? null,
    free_token_window_seconds: m.free_token_budget?.window_seconds ?? null,
    active: m.active ? 1 : 0,
    created_at: now,
    unsupported_tools: m.unsupported_tools ?? null,
  }));
  const accounts = config.accounts.map(
    (a): ConfigAccount => ({
      id: a.id,
      name: a.name ?? a.id,
      status: a.status,
      balance_micro: idrToMicro(a.balance_idr),
      rpm_limit: a.rpm_limit,
      tier: a.subscription?.tier ?? a.tier,
      payg_enabled: a.payg?.enabled ? 1 : 0,
      payg_limit_micro: a.payg ? idrToMicro(a.payg.limit_idr) : 0,
      payg_window_seconds: a.payg?.window_seconds ?? 30 * 24 * 3600,
      subscription_json: a.subscription ? JSON.stringify(a.subscription) : null,
      subscription_started_at: a.subscription ? (a.subscription.started_at ?? now) : null,
      config_hash: createHash("sha256").update(JSON.stringify(a)).digest("hex"),
      keys: a.keys.map((k) => ({
        id: k.id,
        hash: hashSecret(k.value),
        prefix: keyPrefix(k.value),
        label: k.label || k.id,
        kind: k.kind,
      })),
      byok: a.byok?.map((b, i) => {
        const id = `byok_${a.id}_${i}`;
        return {
          id,
          provider_id: b.provider,
          secret: store.sealByok(id, b.key),
          label: b.provider,
        };
      }),
    }),
  );
  const adminKeys = config.admin_keys.map((value) => {
    const hash = hashSecret(value);
    return { id: `admin_${hash.slice(0, 12)}`, hash };
  });
  // Queued ledger writes land before the config's rows replace what they touch.
  await store.invalidateAll();
  await configApply.apply({
    tiers,
    providers,
    models,
    routes: config.routes.map((r) => ({ name: r.name, steps_json: JSON.stringify(r.steps) })),
    accounts,
    adminKeys,
    now,
  });
  // Provider keys stay in memory: the database only learns how many there are.
  for (const p of config.providers) store.setProviderKeys(p.id, p.api_keys);
  await store.invalidateAll();
}

/**
 * A config key whose value the database already holds under another id (a key `keys create` or a
 * login minted, a demo key) would break the keys' one-row-per-value rule mid-apply: refused
 * first, naming where the key is, before anything is written.
 */
async function refuseKeysHeldElsewhere(
  store: GatewayStore,
  config: GatewayConfig,
  source: string | undefined,
): Promise<void> {
  const problems: string[] = [];
  for (const [i, account] of config.accounts.entries()) {
    for (const [j, key] of account.keys.entries()) {
      const held = await store.findKeyByValue(key.value);
      if (held && held.id !== key.id) {
        problems.push(
          `accounts[${i}].keys[${j}].value: the database already has this key as "${held.id}" of account "${held.account_id}"; give the config key that id to move it here, or use a new value`,
        );
      }
    }
  }
  if (problems.length > 0) throw new ConfigError(problems, source);
}
