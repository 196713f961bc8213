import type { KeyKind, ModelRow, StoredProviderRow, TierRow } from "./types.js";

/**
 * The writes of applying a config file: the catalog (tiers, providers, models, routes), the
 * accounts with their keys and BYOK credentials, and the admin keys, as rows ready to store
 * (money in micro-IDR, secrets hashed or sealed, a base URL carrying a credential too).
 */
export interface ConfigAccount {
  id: string;
  name: string;
  status: string;
  balance_micro: number;
  rpm_limit: number;
  tier: string;
  payg_enabled: number;
  payg_limit_micro: number;
  payg_window_seconds: number;
  subscription_json: string | null;
  subscription_started_at: number | null;
  /** Hash of the account's config section: an unchanged section leaves the account alone. */
  config_hash: string;
  keys: { id: string; hash: string; prefix: string; label: string; kind: KeyKind }[];
  /** Replaces the account's credentials when given; secrets sealed for their row id. */
  byok?: { id: string; provider_id: string; secret: string; label: string }[];
}

export interface ConfigRows {
  tiers: TierRow[];
  providers: StoredProviderRow[];
  models: ModelRow[];
  routes: { name: string; steps_json: string }[];
  accounts: ConfigAccount[];
  adminKeys: { id: string; hash: string }[];
  now: number;
}

/** Every row of the tables a config writes, each table in key order. */
export type ConfigTables = Record<
  | "accounts"
  | "api_keys"
  | "providers"
  | "models"
  | "routes"
  | "tiers"
  | "admin_keys"
  | "byok_credentials",
  unknown[]
>;

export interface ConfigApplyRepository {
  /**
   * Upserts every row in one transaction, so applying the same rows twice leaves what applying
   * them once did. An account whose `config_hash` is the stored one is skipped with its keys and
   * credentials, so a restart does not reset what was spent since. The models, routes and admin
   * keys are the file's: one an earlier apply wrote and this one does not is deleted.
   */
  apply(rows: ConfigRows): Promise<void>;
  /** What the config's tables hold, to compare one apply with the next. */
  tables(): Promise<ConfigTables>;
}

/**
 * What a config leaves out is gone: a model or route no longer served, an admin key taken away
 * (there is no other way to revoke one). The one parameter is the JSON array of the names or hashes
 * the config keeps.
 */
export const configRemovals = {
  sqlite: {
    models: "DELETE FROM models WHERE name NOT IN (SELECT value FROM json_each(?))",
    routes: "DELETE FROM routes WHERE name NOT IN (SELECT value FROM json_each(?))",
    adminKeys: "DELETE FROM admin_keys WHERE hash NOT IN (SELECT value FROM json_each(?))",
  },
  postgres: {
    models: "DELETE FROM models WHERE name NOT IN (SELECT jsonb_array_elements_text($1::jsonb))",
    routes: "DELETE FROM routes WHERE name NOT IN (SELECT jsonb_array_elements_text($1::jsonb))",
    adminKeys:
      "DELETE FROM admin_keys WHERE hash NOT IN (SELECT jsonb_array_elements_text($1::jsonb))",
  },
} as const;

/** The config's upserts, with `@name` parameters, the same SQL on both backends. */
export const configUpserts = {
  provider: `INSERT INTO providers (id, wire, base_url, base_url_sealed, base_url_shown, api_key_count, timeout_ms,
    max_concurrency, options_json, responses_native)
  VALUES (@id, @wire, @base_url, @base_url_sealed, @base_url_shown, @api_key_count, @timeout_ms,
    @max_concurrency, @options_json, @responses_native)
  ON CONFLICT (id) DO UPDATE SET wire = excluded.wire, base_url = excluded.base_url,
    base_url_sealed = excluded.base_url_sealed, base_url_shown = excluded.base_url_shown,
    api_key_count = excluded.api_key_count, timeout_ms = excluded.timeout_ms,
    max_concurrency = excluded.max_concurrency, options_json = excluded.options_json,
    responses_native = excluded.responses_native`,
  model: `INSERT INTO models (name, provider_id, upstream_model, modality, price_input_per_mtok, price_output_per_mtok,
    price_per_request, price_per_unit, subscribers_only, context_window, max_output_tokens,
    free_token_budget, free_token_window_seconds, active, created_at, unsupported_tools)
  VALUES (@name, @provider_id, @upstream_model, @modality, @price_input_per_mtok, @price_output_per_mtok,
    @price_per_request, @price_per_unit, @subscribers_only, @context_window, @max_output_tokens,
    @free_token_budget, @free_token_window_seconds, @active, @created_at, @unsupported_tools)
  ON CONFLICT (name) DO UPDATE SET provider_id = excluded.provider_id, upstream_model = excluded.upstream_model,
    modality = excluded.modality, price_input_per_mtok = excluded.price_input_per_mtok,
    price_output_per_mtok = excluded.price_output_per_mtok, price_per_request = excluded.price_per_request,
    price_per_unit = excluded.price_per_unit, subscribers_only = excluded.subscribers_only,
    context_window = excluded.context_window, max_output_tokens = excluded.max_output_tokens,
    free_token_budget = excluded.free_token_budget,
    free_token_window_seconds = excluded.free_token_window_seconds, active = excluded.active,
    unsupported_tools = excluded.unsupported_tools`,
  route: `INSERT INTO routes (name, steps_json) VALUES (@name, @steps_json)
  ON CONFLICT (name) DO UPDATE SET steps_json = excluded.steps_json`,
  tier: `INSERT INTO tiers (name, rank, free_rpm, free_daily, burst_spacing_ms, burst_queue, min_topup_micro)
  VALUES (@name, @rank, @free_rpm, @free_daily, @burst_spacing_ms, @burst_queue, @min_topup_micro)
  ON CONFLICT (name) DO UPDATE SET rank = excluded.rank, free_rpm = excluded.free_rpm,
    free_daily = excluded.free_daily, burst_spacing_ms = excluded.burst_spacing_ms,
    burst_queue = excluded.burst_queue, min_topup_micro = excluded.min_topup_micro`,
  account: `INSERT INTO accounts (id, name, status, balance_micro, rpm_limit, tier, payg_enabled, payg_limit_micro,
    payg_window_seconds, payg_window_start, subscription_json, subscription_started_at, config_hash, created_at)
  VALUES (@id, @name, @status, @balance_micro, @rpm_limit, @tier, @payg_enabled, @payg_limit_micro,
    @payg_window_seconds, @now, @subscription_json, @subscription_started_at, @config_hash, @now)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name, status = excluded.status,
    balance_micro = excluded.balance_micro, rpm_limit = excluded.rpm_limit, tier = excluded.tier,
    payg_enabled = excluded.payg_enabled, payg_limit_micro = excluded.payg_limit_micro,
    payg_window_seconds = excluded.payg_window_seconds, subscription_json = excluded.subscription_json,
    subscription_started_at = excluded.subscription_started_at, config_hash = excluded.config_hash`,
  key: `INSERT INTO api_keys (id, account_id, hash, prefix, label, kind, created_at)
  VALUES (@id, @account_id, @hash, @prefix, @label, @kind, @now)
  ON CONFLICT (id) DO UPDATE SET account_id = excluded.account_id, hash = excluded.hash,
    prefix = excluded.prefix, label = excluded.label, kind = excluded.kind, revoked_at = NULL`,
} as const;
