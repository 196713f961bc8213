import type { Statement } from "better-sqlite3";
import { type DB, openDatabase } from "./db.js";
import {
  byokContext,
  loadSecretBox,
  type SecretBox,
  sealPlaintextByok,
  secretKeyEnv,
} from "./secret-box.js";
import { hashSecret, keyPrefix, newGatewayKey, newId } from "./secrets.js";
import type {
  AccountRow,
  ByokRow,
  KeyKind,
  KeyRow,
  KeyWithAccount,
  ModelRow,
  ProviderRow,
  RequestLogRow,
  TierRow,
} from "./types.js";

/**
 * Typed queries over the gateway's SQLite file. Every statement is prepared once here;
 * the request path never builds SQL.
 *
 * One gateway process owns a database file, and every write goes through this class (or the
 * Ledger), so the rows the hot path reads are cached here and updated or dropped by each write:
 * a revocation or suspension is seen by the very next request without a query per request.
 */
export class Store {
  readonly db: DB;
  private readonly stmts: ReturnType<typeof prepare>;
  /** Catalog rows change only when a config or admin call writes them; reads on the hot path hit this. */
  private catalog: Catalog | null = null;
  private readonly accounts = new Map<string, AccountRow>();
  /** Known keys by hash. Misses are not cached, so random keys cannot grow it. */
  private readonly keysByHash = new Map<string, KeyRow>();
  /** Opened once per account when first needed; the database holds them sealed only. */
  private readonly byok = new Map<string, ByokRow[]>();
  /** Provider API keys from the config: in memory only, never in the database. */
  private readonly providerKeys = new Map<string, readonly string[]>();
  private readonly secrets: SecretBox;
  /** Run before an account row is written outside the ledger, so queued ledger writes land first. */
  private readonly beforeAccountWrites: (() => void)[] = [];

  private readonly runInTransaction: ReturnType<DB["transaction"]>;

  /** `secretKey` (base64, 32 bytes) seals BYOK credentials; else `<path>.key` holds the key. */
  constructor(
    readonly path: string,
    options: { secretKey?: string } = { secretKey: process.env[secretKeyEnv] },
  ) {
    this.db = openDatabase(path);
    try {
      this.secrets = loadSecretBox(this.db, path, options.secretKey);
      sealPlaintextByok(this.db, this.secrets);
    } catch (err) {
      this.db.close();
      throw err;
    }
    this.stmts = prepare(this.db);
    this.runInTransaction = this.db.transaction((fn: () => unknown) => fn());
  }

  onBeforeAccountWrite(hook: () => void): void {
    this.beforeAccountWrites.push(hook);
  }

  /** An account write outside the ledger: queued ledger writes first, then the write, then a fresh read. */
  private writeAccount<T>(id: string | null, write: () => T): T {
    for (const hook of this.beforeAccountWrites) hook();
    const result = write();
    if (id === null) this.accounts.clear();
    else this.accounts.delete(id);
    return result;
  }

  close(): void {
    this.db.close();
  }

  /** BEGIN IMMEDIATE ... COMMIT around `fn`; one wrapper serves every call. */
  transaction<T>(fn: () => T): T {
    return this.runInTransaction.immediate(fn) as T;
  }

  // ---- keys -------------------------------------------------------------

  findKeyByValue(value: string): KeyWithAccount | undefined {
    const hash = hashSecret(value);
    let key = this.keysByHash.get(hash);
    if (!key) {
      key = this.stmts.keyByHash.get(hash) as KeyRow | undefined;
      if (!key) return undefined;
      this.keysByHash.set(hash, key);
    }
    const account = this.getAccount(key.account_id);
    return { ...key, account_status: account?.status ?? "suspended" };
  }

  isAdminKey(value: string): boolean {
    return this.stmts.adminByHash.get(hashSecret(value)) !== undefined;
  }

  touchKey(id: string, now: number): void {
    this.stmts.touchKey.run(now, id);
    for (const key of this.keysByHash.values()) if (key.id === id) key.last_used_at = now;
  }

  /** Mints a key and returns its only plaintext copy. */
  createKey(input: {
    accountId: string;
    label: string;
    kind: KeyKind;
    parentKeyId?: string | null;
    now?: number;
  }): { key: KeyRow; value: string } {
    const value = newGatewayKey();
    const id = newId("key");
    this.insertKey(
      id,
      input.accountId,
      value,
      input.label,
      input.kind,
      input.parentKeyId ?? null,
      input.now,
    );
    return { key: this.getKey(id)!, value };
  }

  private insertKey(
    id: string,
    accountId: string,
    value: string,
    label: string,
    kind: KeyKind,
    parentKeyId: string | null,
    now = Date.now(),
  ): void {
    this.stmts.insertKey.run({
      id,
      account_id: accountId,
      hash: hashSecret(value),
      prefix: keyPrefix(value),
      label,
      kind,
      parent_key_id: parentKeyId,
      created_at: now,
    });
  }

  getKey(id: string): KeyRow | undefined {
    return this.stmts.keyById.get(id) as KeyRow | undefined;
  }

  listKeys(accountId: string): KeyRow[] {
    return this.stmts.keysByAccount.all(accountId) as KeyRow[];
  }

  listChildKeys(parentKeyId: string): KeyRow[] {
    return this.stmts.keysByParent.all(parentKeyId) as KeyRow[];
  }

  /** Returns false when the key does not exist or was already revoked. */
  revokeKey(id: string, now = Date.now()): boolean {
    const changed = this.stmts.revokeKey.run(now, id).changes > 0;
    this.keysByHash.clear();
    return changed;
  }

  // ---- accounts ---------------------------------------------------------

  /** The cached row: the ledger keeps its money columns current; other writes drop it. */
  getAccount(id: string): AccountRow | undefined {
    let account = this.accounts.get(id);
    if (!account) {
      account = this.stmts.accountById.get(id) as AccountRow | undefined;
      if (account) this.accounts.set(id, account);
    }
    return account;
  }

  listAccounts(): AccountRow[] {
    return this.stmts.allAccounts.all() as AccountRow[];
  }

  accountCount(): number {
    return (this.stmts.accountCount.get() as { n: number }).n;
  }

  createAccount(input: {
    id: string;
    name: string;
    balanceMicro: number;
    rpmLimit: number;
    tier: string;
    now: number;
  }): AccountRow {
    this.writeAccount(input.id, () => this.stmts.insertAccount.run({ ...input }));
    return this.getAccount(input.id)!;
  }

  /** Sets only the columns given; the caller validated names and values. */
  updateAccount(
    id: string,
    patch: Partial<Record<AccountColumn, string | number | null>>,
  ): boolean {
    const entries = Object.entries(patch).filter(([k]) =>
      accountColumns.includes(k as AccountColumn),
    );
    if (entries.length === 0) return this.getAccount(id) !== undefined;
    const sql = `UPDATE accounts SET ${entries.map(([k]) => `${k} = @${k}`).join(", ")} WHERE id = @id`;
    return this.writeAccount(
      id,
      () => this.db.prepare(sql).run({ ...Object.fromEntries(entries), id }).changes > 0,
    );
  }

  /** Adds money and moves the account up to the highest tier this top-up qualifies for. */
  topUp(id: string, amountMicro: number): AccountRow | undefined {
    return this.writeAccount(id, () =>
      this.transaction(() => {
        if (this.stmts.topUp.run(amountMicro, id).changes === 0) return undefined;
        const account = this.getAccount(id)!;
        const current = this.getCatalog().tiers.get(account.tier);
        let best = current;
        for (const tier of this.getCatalog().tiers.values()) {
          if (
            tier.min_topup_micro !== null &&
            amountMicro >= tier.min_topup_micro &&
            tier.rank > (best?.rank ?? -1)
          )
            best = tier;
        }
        if (best && best.name !== account.tier) this.stmts.setTier.run(best.name, id);
        return true;
      }),
    )
      ? this.getAccount(id)
      : undefined;
  }

  addByok(
    accountId: string,
    providerId: string,
    secret: string,
    label: string,
    now: number,
  ): ByokRow {
    const id = newId("byok");
    const position = (this.stmts.maxByokPosition.get(accountId) as { p: number | null }).p ?? -1;
    this.stmts.insertByok.run(
      id,
      accountId,
      providerId,
      this.sealByok(id, secret),
      label,
      position + 1,
      now,
    );
    this.byok.delete(accountId);
    return { ...(this.stmts.byokById.get(id) as ByokRow), secret };
  }

  /** The form a BYOK credential is stored in, bound to its row id. */
  sealByok(id: string, secret: string): string {
    return this.secrets.seal(secret, byokContext(id));
  }

  /** A config's provider keys; the same keys keep their array, so key pools keep their state. */
  setProviderKeys(providerId: string, keys: readonly string[]): void {
    const current = this.providerKeys.get(providerId);
    if (current && current.length === keys.length && current.every((k, i) => k === keys[i])) return;
    this.providerKeys.set(providerId, [...keys]);
    this.catalog = null;
  }

  /** Providers whose config gave API keys that this process was not given (no --config). */
  providersWithoutKeys(): string[] {
    return [...this.getCatalog().providers.values()]
      .filter((p) => p.api_key_count > 0 && p.api_keys.length === 0)
      .map((p) => p.id);
  }

  deleteByok(accountId: string, id: string): boolean {
    this.byok.delete(accountId);
    return this.stmts.deleteByok.run(id, accountId).changes > 0;
  }

  setAccountStatus(id: string, status: "active" | "suspended"): boolean {
    return this.writeAccount(id, () => this.stmts.setAccountStatus.run(status, id).changes > 0);
  }

  // ---- catalog ----------------------------------------------------------

  /** After a config is applied: every cached row may have changed. */
  invalidateAll(): void {
    this.catalog = null;
    this.writeAccount(null, () => undefined);
    this.keysByHash.clear();
    this.byok.clear();
  }

  getCatalog(): Catalog {
    if (!this.catalog) this.catalog = loadCatalog(this.db, this.providerKeys);
    return this.catalog;
  }

  /** Tokens a free model has served in its current budget window. */
  freeTokensUsed(model: string, windowSeconds: number, now: number): number {
    const start = windowStart(windowSeconds, now);
    const row = this.stmts.freeTokens.get(model) as
      | { window_start: number; tokens: number }
      | undefined;
    return row && row.window_start === start ? row.tokens : 0;
  }

  addFreeTokens(model: string, windowSeconds: number, tokens: number, now: number): void {
    this.stmts.addFreeTokens.run(model, windowStart(windowSeconds, now), tokens);
  }

  usageSummary(accountId: string, since: number) {
    const row = this.stmts.usageSummary.get(accountId, since) as {
      requests: number;
      succeeded: number;
      failed: number;
      input_tokens: number;
      output_tokens: number;
      cost_micro: number;
    };
    return {
      since: new Date(since).toISOString(),
      requests: row.requests,
      succeeded: row.succeeded ?? 0,
      failed: row.failed ?? 0,
      input_tokens: row.input_tokens ?? 0,
      output_tokens: row.output_tokens ?? 0,
      cost_idr: (row.cost_micro ?? 0) / 1_000_000,
    };
  }

  usageDaily(accountId: string, since: number) {
    return (
      this.stmts.usageDaily.all(accountId, since) as {
        day: string;
        requests: number;
        input_tokens: number;
        output_tokens: number;
        cost_micro: number;
      }[]
    ).map((r) => ({
      date: r.day,
      requests: r.requests,
      input_tokens: r.input_tokens,
      output_tokens: r.output_tokens,
      cost_idr: r.cost_micro / 1_000_000,
    }));
  }

  /** Requests, tokens and cost per model since `since`, most expensive first. */
  usageByModel(accountId: string, since: number) {
    return this.stmts.usageByModel.all(accountId, since) as {
      model: string;
      requests: number;
      input_tokens: number;
      output_tokens: number;
      cost_micro: number;
    }[];
  }

  recentRequests(accountId: string, limit: number) {
    return (this.stmts.recentRequests.all(accountId, limit) as RequestLogRow[]).map((r) => ({
      id: r.id,
      created_at: new Date(r.created_at).toISOString(),
      endpoint: r.endpoint,
      model: r.model,
      state: r.state,
      status: r.status,
      error_code: r.error_code,
      stream: r.stream === 1,
      payment: r.payment,
      input_tokens: r.input_tokens,
      output_tokens: r.output_tokens,
      cost_idr: r.cost_micro / 1_000_000,
      key_id: r.key_id,
      ...(r.tools_omitted ? { tools_omitted: JSON.parse(r.tools_omitted) as string[] } : {}),
    }));
  }

  listByok(accountId: string): ByokRow[] {
    let rows = this.byok.get(accountId);
    if (!rows) {
      rows = [];
      for (const row of this.stmts.byokByAccount.all(accountId) as ByokRow[]) {
        const secret = this.secrets.open(row.secret, byokContext(row.id));
        // Start-up checked the key, so only an altered row gets here: it is left out, never
        // sent upstream as garbage.
        if (secret === undefined) console.error(`byok credential ${row.id} does not open; skipped`);
        else rows.push({ ...row, secret });
      }
      this.byok.set(accountId, rows);
    }
    return rows;
  }
}

export const accountColumns = [
  "name",
  "status",
  "rpm_limit",
  "tier",
  "payg_enabled",
  "payg_limit_micro",
  "payg_window_seconds",
  "payg_window_start",
  "payg_spent_micro",
  "subscription_json",
  "subscription_started_at",
  "balance_micro",
] as const;
export type AccountColumn = (typeof accountColumns)[number];

function windowStart(windowSeconds: number, now: number): number {
  return Math.floor(now / (windowSeconds * 1000)) * windowSeconds * 1000;
}

export interface Catalog {
  providers: Map<string, ProviderRow>;
  models: Map<string, ModelRow>;
  routes: Map<string, string[]>;
  tiers: Map<string, TierRow>;
}

function loadCatalog(db: DB, providerKeys: Map<string, readonly string[]>): Catalog {
  const providers = new Map(
    (db.prepare("SELECT * FROM providers").all() as Omit<ProviderRow, "api_keys">[]).map((p) => [
      p.id,
      { ...p, api_keys: providerKeys.get(p.id) ?? [] },
    ]),
  );
  const models = new Map(
    (db.prepare("SELECT * FROM models ORDER BY name").all() as ModelRow[]).map((m) => [m.name, m]),
  );
  const routes = new Map(
    (
      db.prepare("SELECT * FROM routes ORDER BY name").all() as {
        name: string;
        steps_json: string;
      }[]
    ).map((r) => [r.name, JSON.parse(r.steps_json) as string[]]),
  );
  const tiers = new Map(
    (db.prepare("SELECT * FROM tiers ORDER BY rank").all() as TierRow[]).map((t) => [t.name, t]),
  );
  return { providers, models, routes, tiers };
}

function prepare(db: DB) {
  const s = (sql: string): Statement => db.prepare(sql);
  return {
    keyByHash: s(
      "SELECT id, account_id, prefix, label, kind, parent_key_id, created_at, last_used_at, revoked_at FROM api_keys WHERE hash = ?",
    ),
    adminByHash: s("SELECT id FROM admin_keys WHERE hash = ?"),
    touchKey: s("UPDATE api_keys SET last_used_at = ? WHERE id = ?"),
    insertKey: s(
      `INSERT INTO api_keys (id, account_id, hash, prefix, label, kind, parent_key_id, created_at)
       VALUES (@id, @account_id, @hash, @prefix, @label, @kind, @parent_key_id, @created_at)`,
    ),
    keyById: s(
      "SELECT id, account_id, prefix, label, kind, parent_key_id, created_at, last_used_at, revoked_at FROM api_keys WHERE id = ?",
    ),
    keysByAccount: s(
      "SELECT id, account_id, prefix, label, kind, parent_key_id, created_at, last_used_at, revoked_at FROM api_keys WHERE account_id = ? ORDER BY created_at, id",
    ),
    keysByParent: s(
      "SELECT id, account_id, prefix, label, kind, parent_key_id, created_at, last_used_at, revoked_at FROM api_keys WHERE parent_key_id = ? ORDER BY created_at, id",
    ),
    revokeKey: s("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"),
    accountById: s("SELECT * FROM accounts WHERE id = ?"),
    allAccounts: s("SELECT * FROM accounts ORDER BY created_at, id"),
    accountCount: s("SELECT count(*) AS n FROM accounts"),
    setAccountStatus: s("UPDATE accounts SET status = ? WHERE id = ?"),
    freeTokens: s("SELECT window_start, tokens FROM free_token_usage WHERE model = ?"),
    addFreeTokens: s(
      `INSERT INTO free_token_usage (model, window_start, tokens) VALUES (?, ?, ?)
       ON CONFLICT(model) DO UPDATE SET
         tokens = CASE WHEN window_start = excluded.window_start THEN tokens + excluded.tokens ELSE excluded.tokens END,
         window_start = excluded.window_start`,
    ),
    usageSummary: s(
      `SELECT count(*) AS requests, sum(state = 'settled') AS succeeded, sum(state IN ('failed', 'interrupted')) AS failed,
              sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ?`,
    ),
    usageDaily: s(
      `SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, count(*) AS requests,
              sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ? GROUP BY day ORDER BY day`,
    ),
    usageByModel: s(
      `SELECT coalesce(model, '-') AS model, count(*) AS requests, sum(input_tokens) AS input_tokens,
              sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ?
        GROUP BY coalesce(model, '-') ORDER BY cost_micro DESC, requests DESC`,
    ),
    recentRequests: s(
      "SELECT * FROM request_log WHERE account_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?",
    ),
    insertAccount: s(
      `INSERT INTO accounts (id, name, balance_micro, rpm_limit, tier, payg_window_start, created_at)
       VALUES (@id, @name, @balanceMicro, @rpmLimit, @tier, @now, @now)`,
    ),
    topUp: s("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?"),
    setTier: s("UPDATE accounts SET tier = ? WHERE id = ?"),
    maxByokPosition: s("SELECT max(position) AS p FROM byok_credentials WHERE account_id = ?"),
    insertByok: s(
      "INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
    ),
    byokById: s("SELECT * FROM byok_credentials WHERE id = ?"),
    deleteByok: s("DELETE FROM byok_credentials WHERE id = ? AND account_id = ?"),
    byokByAccount: s(
      "SELECT * FROM byok_credentials WHERE account_id = ? ORDER BY position, created_at",
    ),
  };
}
