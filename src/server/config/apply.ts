import { createHash } from "node:crypto";
import { idrToMicro } from "../../store/money.js";
import { hashSecret, keyPrefix } from "../../store/secrets.js";
import type { Store } from "../../store/store.js";
import type { GatewayConfig } from "./schema.js";

/** Tiers every gateway has unless the config redefines them. */
export const defaultTiers: GatewayConfig["tiers"] = {
  free: { rank: 0, free_rpm: 20, free_daily: 50, burst_spacing_ms: 200, burst_queue: 8 },
  paid: {
    rank: 1,
    free_rpm: 60,
    free_daily: 1000,
    burst_spacing_ms: 100,
    burst_queue: 16,
    min_topup_idr: 10_000,
  },
};

/**
 * Upserts everything the config declares, in one transaction, except provider API keys, which the
 * store keeps in memory only (so a start needs its config again to reach keyed providers). Applying the same file twice
 * leaves the database as applying it once. An account whose config section is unchanged since
 * the last apply is left alone, so a restart does not reset balances spent since.
 */
export function applyConfig(store: Store, config: GatewayConfig, now = Date.now()): void {
  const db = store.database;
  const upsertProvider = db.prepare(
    `INSERT INTO providers (id, wire, base_url, api_key_count, timeout_ms, max_concurrency, options_json, responses_native)
     VALUES (@id, @wire, @base_url, @api_key_count, @timeout_ms, @max_concurrency, @options_json, @responses_native)
     ON CONFLICT(id) DO UPDATE SET wire = excluded.wire, base_url = excluded.base_url,
       api_key_count = excluded.api_key_count, timeout_ms = excluded.timeout_ms,
       max_concurrency = excluded.max_concurrency, options_json = excluded.options_json,
       responses_native = excluded.responses_native`,
  );
  const upsertModel = db.prepare(
    `INSERT INTO models (name, provider_id, upstream_model, modality, price_input_per_mtok, price_output_per_mtok,
       price_per_request, price_per_unit, subscribers_only, context_window, max_output_tokens,
       free_token_budget, free_token_window_seconds, active, created_at, unsupported_tools)
     VALUES (@name, @provider_id, @upstream_model, @modality, @price_input_per_mtok, @price_output_per_mtok,
       @price_per_request, @price_per_unit, @subscribers_only, @context_window, @max_output_tokens,
       @free_token_budget, @free_token_window_seconds, @active, @created_at, @unsupported_tools)
     ON CONFLICT(name) DO UPDATE SET provider_id = excluded.provider_id, upstream_model = excluded.upstream_model,
       modality = excluded.modality, price_input_per_mtok = excluded.price_input_per_mtok,
       price_output_per_mtok = excluded.price_output_per_mtok, price_per_request = excluded.price_per_request,
       price_per_unit = excluded.price_per_unit, subscribers_only = excluded.subscribers_only,
       context_window = excluded.context_window, max_output_tokens = excluded.max_output_tokens,
       free_token_budget = excluded.free_token_budget,
       free_token_window_seconds = excluded.free_token_window_seconds, active = excluded.active,
       unsupported_tools = excluded.unsupported_tools`,
  );
  const upsertRoute = db.prepare(
    `INSERT INTO routes (name, steps_json) VALUES (?, ?)
     ON CONFLICT(name) DO UPDATE SET steps_json = excluded.steps_json`,
  );
  const upsertTier = db.prepare(
    `INSERT INTO tiers (name, rank, free_rpm, free_daily, burst_spacing_ms, burst_queue, min_topup_micro)
     VALUES (@name, @rank, @free_rpm, @free_daily, @burst_spacing_ms, @burst_queue, @min_topup_micro)
     ON CONFLICT(name) DO UPDATE SET rank = excluded.rank, free_rpm = excluded.free_rpm,
       free_daily = excluded.free_daily, burst_spacing_ms = excluded.burst_spacing_ms,
       burst_queue = excluded.burst_queue, min_topup_micro = excluded.min_topup_micro`,
  );
  const accountHash = db.prepare("SELECT config_hash FROM accounts WHERE id = ?");
  const upsertAccount = db.prepare(
    `INSERT INTO accounts (id, name, status, balance_micro, rpm_limit, tier, payg_enabled, payg_limit_micro,
       payg_window_seconds, payg_window_start, subscription_json, subscription_started_at, config_hash, created_at)
     VALUES (@id, @name, @status, @balance_micro, @rpm_limit, @tier, @payg_enabled, @payg_limit_micro,
       @payg_window_seconds, @now, @subscription_json, @subscription_started_at, @config_hash, @now)
     ON CONFLICT(id) DO UPDATE SET name = excluded.name, status = excluded.status,
       balance_micro = excluded.balance_micro, rpm_limit = excluded.rpm_limit, tier = excluded.tier,
       payg_enabled = excluded.payg_enabled, payg_limit_micro = excluded.payg_limit_micro,
       payg_window_seconds = excluded.payg_window_seconds, subscription_json = excluded.subscription_json,
       subscription_started_at = excluded.subscription_started_at, config_hash = excluded.config_hash`,
  );
  const upsertKey = db.prepare(
    `INSERT INTO api_keys (id, account_id, hash, prefix, label, kind, created_at)
     VALUES (@id, @account_id, @hash, @prefix, @label, @kind, @now)
     ON CONFLICT(id) DO UPDATE SET account_id = excluded.account_id, hash = excluded.hash,
       prefix = excluded.prefix, label = excluded.label, kind = excluded.kind, revoked_at = NULL`,
  );
  const deleteByok = db.prepare("DELETE FROM byok_credentials WHERE account_id = ?");
  const insertByok = db.prepare(
    `INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed)
     VALUES (?, ?, ?, ?, ?, ?, ?, 1)`,
  );
  const insertAdmin = db.prepare(
    "INSERT INTO admin_keys (id, hash, created_at) VALUES (?, ?, ?) ON CONFLICT(hash) DO NOTHING",
  );

  // Queued ledger writes land before the config's rows replace what they touch.
  store.invalidateAll();
  store.transaction(() => {
    const tiers = { ...defaultTiers, ...config.tiers };
    for (const [name, t] of Object.entries(tiers)) {
      upsertTier.run({
        name,
        rank: t.rank,
        free_rpm: t.free_rpm,
        free_daily: t.free_daily,
        burst_spacing_ms: t.burst_spacing_ms,
        burst_queue: t.burst_queue,
        min_topup_micro: t.min_topup_idr === undefined ? null : idrToMicro(t.min_topup_idr),
      });
    }
    for (const p of config.providers) {
      upsertProvider.run({
        id: p.id,
        wire: p.wire,
        base_url: p.base_url ?? null,
        api_key_count: p.api_keys.length,
        timeout_ms: p.timeout_ms,
        max_concurrency: p.max_concurrency ?? null,
        options_json: JSON.stringify({
          mock: p.mock ?? {},
          cooldown_ms: p.cooldown_ms,
          unsupported_tools: p.unsupported_tools,
        }),
        responses_native: p.responses_native ? 1 : 0,
      });
    }
    for (const m of config.models) {
      upsertModel.run({
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
      });
    }
    for (const r of config.routes) upsertRoute.run(r.name, JSON.stringify(r.steps));
    for (const a of config.accounts) {
      const hash = createHash("sha256").update(JSON.stringify(a)).digest("hex");
      const existing = accountHash.get(a.id) as { config_hash: string | null } | undefined;
      if (existing?.config_hash === hash) continue;
      upsertAccount.run({
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
        config_hash: hash,
        now,
      });
      for (const k of a.keys) {
        upsertKey.run({
          id: k.id,
          account_id: a.id,
          hash: hashSecret(k.value),
          prefix: keyPrefix(k.value),
          label: k.label || k.id,
          kind: k.kind,
          now,
        });
      }
      if (a.byok) {
        deleteByok.run(a.id);
        a.byok.forEach((b, i) => {
          const id = `byok_${a.id}_${i}`;
          insertByok.run(id, a.id, b.provider, store.sealByok(id, b.key), b.provider, i, now);
        });
      }
    }
    for (const value of config.admin_keys) {
      const hash = hashSecret(value);
      insertAdmin.run(`admin_${hash.slice(0, 12)}`, hash, now);
    }
  });
  // Provider keys stay in memory: the database only learns how many there are.
  for (const p of config.providers) store.setProviderKeys(p.id, p.api_keys);
  store.invalidateAll();
}
