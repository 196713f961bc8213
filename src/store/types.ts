export type KeyKind = "standard" | "login" | "shared";

export interface AccountRow {
  id: string;
  name: string;
  status: "active" | "suspended";
  balance_micro: number;
  rpm_limit: number;
  tier: string;
  payg_enabled: number;
  payg_limit_micro: number;
  payg_window_seconds: number;
  payg_window_start: number;
  payg_spent_micro: number;
  subscription_json: string | null;
  subscription_started_at: number | null;
  created_at: number;
}

export interface KeyRow {
  id: string;
  account_id: string;
  prefix: string;
  label: string;
  kind: KeyKind;
  parent_key_id: string | null;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

/** What authentication needs, read in one indexed query. */
export interface KeyWithAccount extends KeyRow {
  account_status: "active" | "suspended";
}

export interface ProviderRow {
  id: string;
  wire: "openai" | "anthropic" | "mock";
  base_url: string | null;
  /** How many API keys the config gave; the keys themselves live in memory only. */
  api_key_count: number;
  api_keys: readonly string[];
  timeout_ms: number;
  max_concurrency: number | null;
  options_json: string;
  responses_native: number;
}

export interface ModelRow {
  name: string;
  provider_id: string;
  upstream_model: string;
  modality: string;
  price_input_per_mtok: number;
  price_output_per_mtok: number;
  price_per_request: number;
  price_per_unit: number;
  subscribers_only: number;
  context_window: number;
  max_output_tokens: number;
  free_token_budget: number | null;
  free_token_window_seconds: number | null;
  active: number;
  created_at: number;
  /** What to do with a tool the backend cannot run; null follows the provider's option. */
  unsupported_tools: "omit" | "reject" | null;
}

export interface TierRow {
  name: string;
  rank: number;
  free_rpm: number;
  free_daily: number;
  burst_spacing_ms: number;
  burst_queue: number;
  min_topup_micro: number | null;
}

export interface ByokRow {
  id: string;
  account_id: string;
  provider_id: string;
  secret: string;
  label: string;
  position: number;
  created_at: number;
}

export interface RequestLogRow {
  id: string;
  account_id: string;
  key_id: string | null;
  endpoint: string;
  model: string | null;
  state: "reserved" | "settled" | "failed" | "interrupted";
  payment: string;
  reserved_micro: number;
  cost_micro: number;
  input_tokens: number;
  output_tokens: number;
  status: number | null;
  error_code: string | null;
  provider_id: string | null;
  stream: number;
  created_at: number;
  finished_at: number | null;
  /** JSON array of tool names, or null. */
  tools_omitted: string | null;
}

/**
 * An account's subscription as `subscription_json` holds it: the config's `subscription` with its
 * defaults applied (`subscriptionSchema` in the config schema parses to exactly this).
 */
export interface Subscription {
  plan: string;
  /** At most `quota` requests in each window of `seconds`, the windows counted from the start. */
  windows: { name: string; seconds: number; quota: number }[];
  /** The models the subscription covers; absent, it covers every model. */
  models?: string[];
  payg_fallback: boolean;
  free_fallback: boolean;
  tier?: string;
  started_at?: number;
}

export function parseSubscription(account: AccountRow): Subscription | null {
  return account.subscription_json ? (JSON.parse(account.subscription_json) as Subscription) : null;
}
