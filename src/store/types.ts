import type { BaseUrlColumns } from "./provider-urls.js";
import type { RequestSource } from "./request-source.js";

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
  /** One of the registry's wires (`server/providers/registry.ts`); the database checks it. */
  wire: string;
  /**
   * The whole URL calls go to, opened from its sealed column when it carries a credential: never
   * shown as it is (`shownUrl`).
   */
  base_url: string | null;
  /** How many API keys the config gave; the keys themselves live in memory only. */
  api_key_count: number;
  api_keys: readonly string[];
  timeout_ms: number;
  max_concurrency: number | null;
  options_json: string;
  responses_native: number;
}

/** A provider row as a database holds it: no API keys, the base URL in its columns. */
export type StoredProviderRow = Omit<ProviderRow, "api_keys" | "base_url"> & BaseUrlColumns;

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
  /**
   * When the provider first refused this key (401, 403) since it last answered with it: the
   * owner's lists show it. Null while the key works.
   */
  refused_at: number | null;
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
  /** The model that served the request (a route's step); null when none did. */
  served_model: string | null;
  stream: number;
  created_at: number;
  finished_at: number | null;
  /** JSON array of tool names, or null. */
  tools_omitted: string | null;
  /**
   * The music or video job the request queued (the job whose `request_id` it is), or null; read
   * with the row by the account's listings, not a column of the log.
   */
  job_id?: string | null;
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

/**
 * How a request was paid for; `request_log.payment`. `byok`: the provider was paid with the
 * account's own key, whatever the request held while it ran.
 */
export type Payment = "balance" | "payg" | "subscription" | "free" | "byok" | "none";

/**
 * A request_log row in the insert's column order. Positional: binding a named-parameter object
 * costs more on every request, and the settlement journal keeps rows in this form.
 */
export type RequestLogValues = [
  id: string,
  accountId: string,
  keyId: string | null,
  endpoint: string,
  model: string | null,
  state: RequestLogRow["state"],
  payment: Payment,
  paymentRef: string | null,
  reservedMicro: number,
  costMicro: number,
  inputTokens: number,
  outputTokens: number,
  status: number,
  errorCode: string | null,
  providerId: string | null,
  stream: number,
  createdAt: number,
  finishedAt: number,
  toolsOmitted: string | null,
  // A journal line written before the column was added has none.
  servedModel?: string | null,
];

/** One write of the Ledger, as data: queued, committed in a batch, and a line of the journal. */
export type LedgerWrite =
  | {
      kind: "settle";
      seq: number;
      accountId: string;
      payment: Payment;
      charge: number;
      /** The PAYG window a PAYG charge counts in. */
      paygWindow: number | null;
      /** The UTC day a delivered free request counts on. */
      freeDay: string | null;
      /** Subscription windows a delivered request counts in: [name, start]. */
      windows: [string, number][];
      log: RequestLogValues;
      /**
       * A delivered answer's tokens in its free model's token budget: [model, window start,
       * tokens], counted with the rest of the write (a delivery mark's only if it is applied).
       */
      freeTokens?: [string, number, number];
    }
  | { kind: "resetPayg"; seq: number; accountId: string; start: number };

export type SettleWrite = Extract<LedgerWrite, { kind: "settle" }>;

/**
 * A stream's charge should the gateway die before the stream settles: the settlement it would
 * then get, made durable before the output it pays for goes out (a line of the settlement journal
 * on SQLite; its `seq` is given when a start applies it).
 */
export interface DeliveryMark {
  kind: "mark";
  settle: SettleWrite;
}

/**
 * A stream whose settlement the database refused (its client was told nothing was charged): its
 * delivery marks are withdrawn, so no start applies them.
 */
export interface MarkWithdrawn {
  kind: "unmark";
  id: string;
}

/** A line of the settlement journal. */
export type JournalLine = LedgerWrite | DeliveryMark | MarkWithdrawn;

/** Columns of an account only the Ledger writes: its money and its PAYG state. */
export const moneyColumns = [
  "balance_micro",
  "payg_enabled",
  "payg_limit_micro",
  "payg_window_seconds",
  "payg_window_start",
  "payg_spent_micro",
] as const;
export type MoneyColumn = (typeof moneyColumns)[number];

/** Columns of an account any account write may set. */
export const profileColumns = [
  "name",
  "status",
  "rpm_limit",
  "tier",
  "subscription_json",
  "subscription_started_at",
] as const;
export type ProfileColumn = (typeof profileColumns)[number];

export type AccountColumn = MoneyColumn | ProfileColumn;
export type AccountPatch<Column extends AccountColumn = AccountColumn> = Partial<
  Record<Column, string | number | null>
>;

/** The entries of `patch` that name one of `columns`. */
export function pickColumns<Column extends ProfileColumn | MoneyColumn>(
  patch: AccountPatch,
  columns: readonly Column[],
): AccountPatch<Column> {
  const picked: AccountPatch<Column> = {};
  for (const column of columns) if (patch[column] !== undefined) picked[column] = patch[column];
  return picked;
}

export interface Catalog {
  providers: Map<string, ProviderRow>;
  models: Map<string, ModelRow>;
  routes: Map<string, string[]>;
  tiers: Map<string, TierRow>;
}

export interface UsageSummary {
  since: string;
  requests: number;
  succeeded: number;
  failed: number;
  input_tokens: number;
  output_tokens: number;
  cost_idr: number;
}

export interface UsageDay {
  date: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cost_idr: number;
}

export interface UsageByModel {
  model: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cost_micro: number;
}

/** A request_log row as the usage endpoints show it. */
export interface RecentRequest {
  id: string;
  created_at: string;
  endpoint: string;
  /** `mcp` for a tool call of the gateway's MCP server (absent for a request made to /v1). */
  via?: RequestSource;
  model: string | null;
  /** The model that served the request (for a route, the step that answered); null when none did. */
  served_model: string | null;
  state: RequestLogRow["state"];
  status: number | null;
  error_code: string | null;
  stream: boolean;
  payment: string;
  input_tokens: number;
  output_tokens: number;
  cost_idr: number;
  key_id: string | null;
  tools_omitted?: string[];
  /** The music or video job the request queued (absent for any other request). */
  job_id?: string;
}

/**
 * A page of a list as OpenAI's list endpoints take it: at most `limit` rows, those after the row
 * whose id is `after` (from the first when absent), in `order` (`desc`: newest first).
 */
export interface PageQuery {
  after?: string;
  limit: number;
  order: "asc" | "desc";
}

/** A page of the request log; `hasMore`: more requests lie beyond it in its order. */
export interface RequestPage {
  requests: RecentRequest[];
  hasMore: boolean;
}

// ---- repositories ------------------------------------------------------------
// The seam a storage backend implements. Reads the request path makes are answered from memory
// (synchronously); every write keeps those answers current. A write resolves once it is
// committed, so what a client was told exists, exists for every gateway on the database. Writes
// that answer yes or no return a Promise on every backend (a promise in a condition is always
// true); the rest answer at once where they can (SQLite) and callers await them.

/** An answer now (SQLite, a cached row) or once a backend across the network replies. */
export type MaybeAsync<T> = T | Promise<T>;

/**
 * `next` applied to `value`: at once when the value is there, after it when it is a promise. An
 * await of a plain value would still cost a turn of the microtask queue on the SQLite path.
 */
export function andThen<T, R>(
  value: MaybeAsync<T>,
  next: (ready: T) => R,
): R | Promise<Awaited<R>> {
  return value instanceof Promise ? (value.then(next) as Promise<Awaited<R>>) : next(value);
}

/** A new account as `createAccount` takes it: money in micro-IDR, times in epoch milliseconds. */
export interface NewAccount {
  id: string;
  name: string;
  balanceMicro: number;
  rpmLimit: number;
  tier: string;
  now: number;
}

/** Accounts, their API keys and their BYOK credentials. */
export interface AccountRepository {
  /** The cached row; its money columns include settlements not yet committed. */
  getAccount(id: string): AccountRow | undefined;
  listAccounts(): AccountRow[];
  accountCount(): number;
  createAccount(input: NewAccount): MaybeAsync<AccountRow>;
  /** Sets only the columns given; the caller validated names and values. Money goes through the Ledger. */
  updateAccount(id: string, patch: AccountPatch<ProfileColumn>): Promise<boolean>;
  setAccountStatus(id: string, status: AccountRow["status"]): Promise<boolean>;
  /**
   * The account with its money as committed now, for showing it: `getAccount`'s money columns are
   * only this process's view where several gateways share the database.
   */
  readAccount(id: string): MaybeAsync<AccountRow | undefined>;
  /** Every account as `readAccount` reads one, oldest first: one read, not one per account. */
  readAccounts(): MaybeAsync<AccountRow[]>;

  /**
   * The key with this plaintext value and its account's status, from memory once seen (a backend
   * across the network answers a key it has not seen yet later).
   */
  findKeyByValue(value: string): MaybeAsync<KeyWithAccount | undefined>;
  isAdminKey(value: string): boolean;
  /** Records a use of the key; the request does not wait for the write. */
  touchKey(id: string, now: number): void;
  /** Mints a key and returns its only plaintext copy. */
  createKey(input: {
    accountId: string;
    label: string;
    kind: KeyKind;
    parentKeyId?: string | null;
    now?: number;
  }): MaybeAsync<{ key: KeyRow; value: string }>;
  /**
   * From memory on a shared database: current for a key's existence, label and revocation, but
   * not for another gateway's uses (`last_used_at`), which `listKeys` shows.
   */
  getKey(id: string): KeyRow | undefined;
  /**
   * The account's keys, oldest first, for showing them: read from the database, as another
   * gateway's uses of a key reach no other gateway's memory. A use this process recorded is in it.
   */
  listKeys(accountId: string): MaybeAsync<KeyRow[]>;
  /**
   * The account's per-tool keys (those a login key minted, whichever login key: a new login
   * replaces the old one, not the keys it made), oldest first, read as `listKeys` reads them.
   */
  listToolKeys(accountId: string): MaybeAsync<KeyRow[]>;
  /** Returns false when the key does not exist or was already revoked. */
  revokeKey(id: string, now?: number): Promise<boolean>;

  /** The account's BYOK credentials in order, opened. */
  listByok(accountId: string): ByokRow[];
  addByok(
    accountId: string,
    providerId: string,
    secret: string,
    label: string,
    now: number,
  ): MaybeAsync<ByokRow>;
  deleteByok(accountId: string, id: string): Promise<boolean>;
  /**
   * Marks the credential refused by its provider at `at` (a mark already there keeps its first
   * time), or clears the mark (`at` null). Resolves once the account's list shows it.
   */
  markByokRefused(accountId: string, id: string, at: number | null): Promise<void>;
  /** The form a BYOK credential is stored in, bound to its row id. */
  sealByok(id: string, secret: string): string;
}

/** Providers, models, routes and tiers, with the provider keys the config gave. */
export interface CatalogRepository {
  getCatalog(): Catalog;
  /** A config's provider keys; the same keys keep their array, so key pools keep their state. */
  setProviderKeys(providerId: string, keys: readonly string[]): void;
  /** Providers whose config gave API keys that this process was not given. */
  providersWithoutKeys(): string[];
  /**
   * The columns a provider's base URL is stored in (`store/provider-urls.ts`): one carrying a
   * credential sealed, bound to the provider's id; the same URL the row already holds keeps its
   * sealed form, so applying a config twice writes the same row.
   */
  baseUrlColumns(providerId: string, url: string | null): BaseUrlColumns;
}

/** What accounts and free models have used: the request log and the free token budgets. */
export interface UsageRepository {
  usageSummary(accountId: string, since: number): MaybeAsync<UsageSummary>;
  usageDaily(accountId: string, since: number): MaybeAsync<UsageDay[]>;
  /**
   * Requests, tokens and cost per model that served them since `since` (a route's step; the model
   * asked for where none served), most expensive first: each request is in one group, so the
   * groups add up to the account's totals.
   */
  usageByModel(accountId: string, since: number): MaybeAsync<UsageByModel[]>;
  /** The account's newest requests, newest first: the first page of `requestPage`. */
  recentRequests(accountId: string, limit: number): MaybeAsync<RecentRequest[]>;
  /**
   * A page of the account's request log, ordered by admission time and, within a millisecond, by
   * the order the rows were written, so a request is on exactly one page of a walk. Undefined when
   * `after` is no request of this account (another account's id included).
   */
  requestPage(accountId: string, page: PageQuery): MaybeAsync<RequestPage | undefined>;
  /** One request of the account's log (another account's id finds nothing). */
  requestOf(accountId: string, id: string): MaybeAsync<RequestLogRow | undefined>;
  /** The account's request log, newest first. */
  requestLog(accountId: string, limit: number): MaybeAsync<RequestLogRow[]>;
  /**
   * Tokens a free model has served in its current budget window. The stored window never moves
   * back: one newer than `now`'s (a clock behind another gateway's, or set back) is the current
   * one, its tokens spent.
   */
  freeTokensUsed(model: string, windowSeconds: number, now: number): MaybeAsync<number>;
  /**
   * The latest time the newest requests of the log record (a start or an end), 0 for an empty log:
   * a gateway started on a clock behind it reads this instead until its clock catches up.
   */
  latestRecordedAt(): MaybeAsync<number>;
}

/**
 * What the gateway's handlers read and write accounts, the catalog and usage through: SQLite's
 * `Store`, or Postgres's, whose caches other gateways' writes reach by LISTEN/NOTIFY.
 */
export interface GatewayStore extends AccountRepository, CatalogRepository, UsageRepository {
  /** Every cached row may have changed (a config was applied): read the database again. */
  invalidateAll(): MaybeAsync<void>;
  close(): MaybeAsync<void>;
}

/**
 * Per-key counts in fixed windows and pacing slots, for the limits: in this process's memory
 * with SQLite, in the database with Postgres so that a limit is one limit across every gateway.
 * A window is `floor(now / windowMs)`; a new window starts its count at zero.
 */
/**
 * Requests of the request log admitted in one window, by account, key, endpoint and model: what a
 * gateway whose limit counters live in its own memory restores them from at start.
 */
export interface AdmittedCount {
  accountId: string;
  keyId: string | null;
  /** The key is a shared key. */
  shared: boolean;
  /** As logged (`loggedEndpoint`). */
  endpoint: string;
  model: string;
  /** The start of the window they were admitted in. */
  windowStart: number;
  requests: number;
}

export interface LimitCounters {
  /** Counts one if fewer than `limit` were counted in this window: the count after, or null. */
  take(key: string, limit: number, windowMs: number, now: number): MaybeAsync<number | null>;
  /** Gives back one count of this window (a request that did not happen). */
  giveBack(key: string, windowMs: number, now: number): MaybeAsync<void>;
  used(key: string, windowMs: number, now: number): MaybeAsync<number>;
  /**
   * Requests closer together than `spacingMs` queue for the next free slot: the wait before this
   * one's, or null when `queueLimit` already wait. One that waited calls `leaveSlot` after.
   */
  claimSlot(
    key: string,
    spacingMs: number,
    queueLimit: number,
    now: number,
  ): MaybeAsync<number | null>;
  leaveSlot(key: string): MaybeAsync<void>;
}

/**
 * The Ledger's storage: the one writer of money and allowance columns. Its reads include the
 * writes the Ledger has queued (`remember`) and not yet committed.
 */
export interface LedgerRepository {
  /** The sequence number of the last journal line the database holds. */
  appliedSeq(): number;
  /** The request log has the row of this request (found by its account and start): it was settled. */
  isLogged(log: RequestLogValues): boolean;
  /** Tokens a free model has served in its budget's window (`UsageRepository.freeTokensUsed`). */
  freeTokensUsed(model: string, windowSeconds: number, now: number): number;
  /** Delivered free-model requests of the account on a UTC day. */
  freeUsed(accountId: string, day: string): number;
  /** Requests counted in a subscription window that started at `start`. */
  subscriptionUsed(accountId: string, window: string, start: number): number;
  /** A write just queued: the cached account and counts show it from now on. */
  remember(write: LedgerWrite): void;
  /** Writes in one transaction that also records the last one's sequence number. */
  commit(writes: readonly LedgerWrite[]): void;
  /** One write inside the caller's transaction (a job row and its charge commit together). */
  write(write: LedgerWrite): void;
  /** A commit that changes nothing but needs room to land: is the disk writable again? */
  probe(): void;
  /** Adds money and, when `tier` is given, moves the account to it; committed at once. */
  topUp(accountId: string, amountMicro: number, tier: string | null): boolean;
  /** Sets money columns, and the profile columns given with them, in one transaction. */
  updateAccount(accountId: string, patch: AccountPatch): boolean;
  /** Forgets every cached account and count: the database is the truth again. */
  reload(): void;
}

export function parseSubscription(account: AccountRow): Subscription | null {
  return account.subscription_json ? (JSON.parse(account.subscription_json) as Subscription) : null;
}

/** Why an account cannot pay for a request: the spec's error code. */
export type PaymentRefusal =
  | "plan_limit_reached"
  | "insufficient_balance"
  | "payg_limit_reached"
  | "free_quota_daily";

/**
 * A request's hold on its account, from admission until settlement. Holds live in memory: a
 * request that dies with the process before any output was never answered, so forgetting its hold
 * is releasing it; a stream that delivered output is charged by its delivery mark
 * (`DeliveryMark`). (A job keeps its Reservation in its row and restores the hold at start-up.)
 */
export interface Reservation {
  id: string;
  accountId: string;
  keyId: string | null;
  endpoint: string;
  model: string;
  stream: boolean;
  createdAt: number;
  payment: Payment;
  reservedMicro: number;
  /** free: the UTC day counted; subscription: JSON of the window starts counted. */
  paymentRef: string | null;
  /**
   * Set by the first settlement. A route that settled a delivered request and then failed to make
   * it durable (a full disk) settles it again as failed: that second one must not release the
   * hold twice.
   */
  settled?: boolean;
}

export interface ReserveInput {
  id: string;
  accountId: string;
  keyId: string | null;
  endpoint: string;
  model: string;
  stream: boolean;
  worstCaseMicro: number;
  /** The model's name is covered by the account's subscription windows. */
  subscriptionModel: boolean;
  /** Free models and BYOK requests hold no money; they only count allowances. */
  payment?: "free" | "byok";
  freeDailyLimit?: number;
  /** A job's hold: kept in its row until the job ends, on whichever gateway runs it. */
  outlivesRequest?: boolean;
  /**
   * A per-minute count taken first, in the hold's own round trip, by a ledger that says it
   * `countsInHold`: over its limit, nothing is held and the request is refused.
   */
  count?: CountTake;
  now: number;
}

/** One request more in a `LimitCounters` window (`take`), named as the counters name it. */
export interface CountTake {
  key: string;
  limit: number;
  windowMs: number;
}

export interface SettleInput {
  status: number;
  costMicro: number;
  inputTokens: number;
  outputTokens: number;
  providerId: string | null;
  /** The model that served the request (a route's step), null when none did. */
  servedModel?: string | null;
  errorCode?: string | null;
  /** The request produced output the client received (a broken stream still counts). */
  delivered: boolean;
  /** Tools the backend could not run, left out of the request it was sent. */
  toolsOmitted?: string[];
  /**
   * Served with the account's own provider key: logged as paid `byok`, whatever it held; the hold
   * is given back whole and nothing counts against the subscription windows or free allowance.
   */
  byokServed?: boolean;
  /** A delivered answer of a free model with a token budget: its tokens, counted in that budget. */
  freeTokens?: FreeTokens;
  now: number;
}

/** Tokens counted in a free model's budget, in the window of `windowSeconds` running then. */
export interface FreeTokens {
  model: string;
  windowSeconds: number;
  tokens: number;
}

/**
 * What a free media request asks of its model's budget before the provider is called: `units`
 * (images, characters, seconds: what it spends at most) of a budget of `tokens` a window of
 * `windowSeconds`.
 */
export interface BudgetHold {
  model: string;
  windowSeconds: number;
  tokens: number;
  units: number;
  now: number;
}

/** A request's reservation once its payment is decided, unsettled. */
export function reservationOf(
  input: ReserveInput,
  paid: Pick<Reservation, "payment" | "reservedMicro" | "paymentRef">,
): Reservation {
  return {
    id: input.id,
    accountId: input.accountId,
    keyId: input.keyId,
    endpoint: input.endpoint,
    model: input.model,
    stream: input.stream,
    createdAt: input.now,
    payment: paid.payment,
    reservedMicro: paid.reservedMicro,
    paymentRef: paid.paymentRef,
    settled: false,
  };
}

/**
 * What the gateways on one database tell each other about the provider keys they share. A key is
 * named by its fingerprint (`keyFingerprint`), never by its secret. Times are durations from
 * now, so gateways whose clocks disagree still agree on when a key is usable again.
 */
export interface KeyPoolSync {
  /** Tells every gateway, this one included, that the key got 429 and cools for `coolMs`. */
  cooled(providerId: string, fingerprint: string, coolMs: number): void;
  /**
   * Calls `listener` with each cooldown any gateway publishes, and with every cooldown still
   * running whenever the connection that hears them is (re)made.
   */
  onCooled(listener: (providerId: string, fingerprint: string, coolMs: number) => void): void;
  /** Gateways with a live lease on the database, this one included: at least one. */
  liveInstances(): number;
  /**
   * How many of those come before this one in the order of their ids: the place that decides
   * which gateways run one more than the rest of max_concurrency's share.
   */
  liveBefore(): number;
}
