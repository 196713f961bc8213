import type pg from "pg";
import { type BaseUrlColumns, holdsPlainBaseUrl, sealedBaseUrl } from "../provider-urls.js";
import { byokContext, SecretBox, SecretKeyError, secretKeyEnv } from "../secret-box.js";
import type {
  AccountPatch,
  AccountRow,
  ByokRow,
  Catalog,
  GatewayStore,
  KeyKind,
  KeyRow,
  KeyWithAccount,
  NewAccount,
  PageQuery,
  ProfileColumn,
  RecentRequest,
  RequestLogRow,
  RequestPage,
  UsageByModel,
  UsageDay,
  UsageSummary,
} from "../types.js";
import { PostgresAccounts } from "./accounts.js";
import { PostgresCatalog } from "./catalog.js";
import { PostgresKeyRows, type PostgresKeyRowWriter } from "./key-rows.js";
import { type Change, ChangeListener, notifyChange } from "./notify.js";
import { inTransaction } from "./transaction.js";
import { PostgresUsage } from "./usage.js";

export interface PostgresStoreOptions {
  /**
   * The key sealing BYOK credentials, in `GATEWAY_SECRET_KEY`'s form; absent, that variable's.
   * Every gateway on the database must be given the same one: there is no file they could share.
   */
  secretKey?: string;
  /** How often everything is read again, whatever was announced. */
  safetyTtlMs?: number;
  /** How long a write waits for every gateway to confirm it has read what the write changed. */
  echoTimeoutMs?: number;
  /** The first wait before the listener reconnects; it doubles on each failure, up to a bound. */
  reconnectDelayMs?: number;
  /** The listener's own connection; default: the pool's settings. */
  listenerConnection?: pg.ClientConfig;
}

/**
 * The gateway's accounts, keys, BYOK credentials, catalog and usage on a Postgres database that
 * several gateways share. What the request path reads is held in memory and answered at once;
 * writes resolve once committed and announced (LISTEN/NOTIFY on `gateway_changes`), and every
 * gateway reads what they changed again, so a revoke or a suspension on one is refused by the
 * next request on any other. The pool is its owner's: `close` stops only what the store started.
 */
export class PostgresStore implements GatewayStore {
  private constructor(
    private readonly pool: pg.Pool,
    /** Writes key rows inside another repository's transaction (device logins), announcing them. */
    readonly keyRows: PostgresKeyRowWriter,
    private readonly accounts: PostgresAccounts,
    private readonly catalog: PostgresCatalog,
    private readonly usage: PostgresUsage,
    /** @internal The change listener, for tests that cut its connection. */
    readonly changes: ChangeListener,
    /** The secret key every gateway on the database holds: what it seals, any of them opens. */
    readonly secrets: SecretBox,
    private readonly accountWatchers: Set<(accountId: string | null) => void>,
  ) {}

  /** Opens on a migrated database: checks the secret key, listens, then reads everything. */
  static async open(pool: pg.Pool, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const secretKey = "secretKey" in options ? options.secretKey : process.env[secretKeyEnv];
    const secrets = await openSecretBox(pool, secretKey);
    const catalog = new PostgresCatalog(pool, secrets);
    const keyRows = new PostgresKeyRows();
    let accounts: PostgresAccounts | undefined;
    const accountWatchers = new Set<(accountId: string | null) => void>();
    const changes = new ChangeListener({
      connection: options.listenerConnection ?? listenerConnectionOf(pool),
      apply: (change) => {
        if (change.t === "account" || change.t === "all") {
          for (const watcher of accountWatchers) watcher(change.t === "all" ? null : change.id);
        }
        return readChange(change, accounts!, catalog);
      },
      ...(options.safetyTtlMs !== undefined && { safetyTtlMs: options.safetyTtlMs }),
      ...(options.echoTimeoutMs !== undefined && { echoTimeoutMs: options.echoTimeoutMs }),
      ...(options.reconnectDelayMs !== undefined && {
        reconnectDelayMs: options.reconnectDelayMs,
      }),
    });
    accounts = new PostgresAccounts(pool, secrets, changes, keyRows);
    await changes.start();
    return new PostgresStore(
      pool,
      keyRows,
      accounts,
      catalog,
      new PostgresUsage(pool),
      changes,
      secrets,
      accountWatchers,
    );
  }

  /**
   * Calls `watcher` with the id of each account row any gateway changes (null: everything may
   * have changed), as the change is read.
   */
  watchAccounts(watcher: (accountId: string | null) => void): void {
    this.accountWatchers.add(watcher);
  }

  /** A config was applied: everything is read again here, and announced to every gateway. */
  async invalidateAll(): Promise<void> {
    await this.changes.publish({ t: "all" }, (nonce) =>
      notifyChange(this.pool, { t: "all" }, nonce),
    );
  }

  close(): Promise<void> {
    return this.changes.stop();
  }

  /**
   * A write of the account's row by its other writer (the Ledger: money, top-ups), announced
   * inside its transaction and read by every gateway before it resolves, as this store's own are.
   */
  announceAccount<T>(
    id: string,
    write: (client: pg.PoolClient) => Promise<T>,
    changed: (result: T) => boolean,
  ): Promise<T> {
    const change: Change = { t: "account", id };
    return this.changes.publish(
      change,
      (nonce) =>
        inTransaction(this.pool, async (client) => {
          const result = await write(client);
          await notifyChange(client, change, nonce);
          return result;
        }),
      changed,
    );
  }

  // ---- accounts, keys, BYOK ---------------------------------------------

  getAccount(id: string): AccountRow | undefined {
    return this.accounts.getAccount(id);
  }

  listAccounts(): AccountRow[] {
    return this.accounts.listAccounts();
  }

  accountCount(): number {
    return this.accounts.accountCount();
  }

  createAccount(input: NewAccount): Promise<AccountRow> {
    return this.accounts.createAccount(input);
  }

  updateAccount(id: string, patch: AccountPatch<ProfileColumn>): Promise<boolean> {
    return this.accounts.updateAccount(id, patch);
  }

  setAccountStatus(id: string, status: AccountRow["status"]): Promise<boolean> {
    return this.accounts.setAccountStatus(id, status);
  }

  readAccount(id: string): Promise<AccountRow | undefined> {
    return this.accounts.readAccount(id);
  }

  readAccounts(): Promise<AccountRow[]> {
    return this.accounts.readAccounts();
  }

  findKeyByValue(value: string): KeyWithAccount | undefined | Promise<KeyWithAccount | undefined> {
    return this.accounts.findKeyByValue(value);
  }

  isAdminKey(value: string): boolean {
    return this.accounts.isAdminKey(value);
  }

  touchKey(id: string, now: number): void {
    this.accounts.touchKey(id, now);
  }

  createKey(input: {
    accountId: string;
    label: string;
    kind: KeyKind;
    parentKeyId?: string | null;
    now?: number;
  }): Promise<{ key: KeyRow; value: string }> {
    return this.accounts.createKey(input);
  }

  getKey(id: string): KeyRow | undefined {
    return this.accounts.getKey(id);
  }

  listKeys(accountId: string): Promise<KeyRow[]> {
    return this.accounts.listKeys(accountId);
  }

  listToolKeys(accountId: string): Promise<KeyRow[]> {
    return this.accounts.listToolKeys(accountId);
  }

  revokeKey(id: string, now?: number): Promise<boolean> {
    return this.accounts.revokeKey(id, now);
  }

  listByok(accountId: string): ByokRow[] {
    return this.accounts.listByok(accountId);
  }

  addByok(
    accountId: string,
    providerId: string,
    secret: string,
    label: string,
    now: number,
  ): Promise<ByokRow> {
    return this.accounts.addByok(accountId, providerId, secret, label, now);
  }

  deleteByok(accountId: string, id: string): Promise<boolean> {
    return this.accounts.deleteByok(accountId, id);
  }

  markByokRefused(accountId: string, id: string, at: number | null): Promise<void> {
    return this.accounts.markByokRefused(accountId, id, at);
  }

  sealByok(id: string, secret: string): string {
    return this.accounts.sealByok(id, secret);
  }

  // ---- catalog ----------------------------------------------------------

  getCatalog(): Catalog {
    return this.catalog.getCatalog();
  }

  setProviderKeys(providerId: string, keys: readonly string[]): void {
    this.catalog.setProviderKeys(providerId, keys);
  }

  providersWithoutKeys(): string[] {
    return this.catalog.providersWithoutKeys();
  }

  baseUrlColumns(providerId: string, url: string | null): BaseUrlColumns {
    return this.catalog.baseUrlColumns(providerId, url);
  }

  // ---- usage ------------------------------------------------------------

  usageSummary(accountId: string, since: number): Promise<UsageSummary> {
    return this.usage.usageSummary(accountId, since);
  }

  usageDaily(accountId: string, since: number): Promise<UsageDay[]> {
    return this.usage.usageDaily(accountId, since);
  }

  usageByModel(accountId: string, since: number): Promise<UsageByModel[]> {
    return this.usage.usageByModel(accountId, since);
  }

  recentRequests(accountId: string, limit: number): Promise<RecentRequest[]> {
    return this.usage.recentRequests(accountId, limit);
  }

  requestPage(accountId: string, page: PageQuery): Promise<RequestPage | undefined> {
    return this.usage.requestPage(accountId, page);
  }

  requestLog(accountId: string, limit: number): Promise<RequestLogRow[]> {
    return this.usage.requestLog(accountId, limit);
  }

  requestOf(accountId: string, id: string): Promise<RequestLogRow | undefined> {
    return this.usage.requestOf(accountId, id);
  }

  freeTokensUsed(model: string, windowSeconds: number, now: number): Promise<number> {
    return this.usage.freeTokensUsed(model, windowSeconds, now);
  }

  latestRecordedAt(): Promise<number> {
    return this.usage.latestRecordedAt();
  }
}

async function readChange(
  change: Change,
  accounts: PostgresAccounts,
  catalog: PostgresCatalog,
): Promise<void> {
  switch (change.t) {
    case "account":
      return accounts.readAccountRow(change.id);
    case "key":
      return accounts.readKeyRow(change.id);
    case "byok":
      return accounts.readByokRows(change.id);
    case "catalog":
      return catalog.readAll();
    case "all":
      await Promise.all([accounts.readAll(), catalog.readAll()]);
  }
}

/** The pool's connection settings, for the listener's own connection beside it. */
function listenerConnectionOf(pool: pg.Pool): pg.ClientConfig {
  const name = pool.options.application_name ?? "model-gateway";
  return { ...pool.options, application_name: `${name} listener` };
}

/**
 * The key that seals this database's BYOK credentials. With several gateways on one database
 * there is no key file beside it: each must be given the same key, and the first to start leaves a
 * check value that tells every later one whether its key is that one.
 */
async function openSecretBox(pool: pg.Pool, key: string | undefined): Promise<SecretBox> {
  if (!key) {
    throw new SecretKeyError(
      `a gateway on Postgres needs ${secretKeyEnv}: every gateway on the database seals and opens BYOK keys with the same key (make one with: openssl rand -base64 32, and give it to each)`,
    );
  }
  const box = SecretBox.parse(key, secretKeyEnv);
  await pool.query(
    "INSERT INTO secret_key_check (id, value) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
    [box.checkValue()],
  );
  const check = await pool.query<{ value: string }>(
    "SELECT value FROM secret_key_check WHERE id = 1",
  );
  if (!box.opensCheck(check.rows[0].value)) {
    throw new SecretKeyError(
      `the key in ${secretKeyEnv} does not open the BYOK keys in this database (a wrong key, or one from another database); use the key the database was sealed with`,
    );
  }
  await sealPlaintextByok(pool, box);
  await sealPlainBaseUrls(pool, box);
  return box;
}

/** Seals BYOK rows still in plain text (copied from before sealing existed), each row once. */
async function sealPlaintextByok(pool: pg.Pool, box: SecretBox): Promise<void> {
  const plain = await pool.query<{ id: string; account_id: string; secret: string }>(
    "SELECT id, account_id, secret FROM byok_credentials WHERE sealed = 0",
  );
  if (plain.rows.length === 0) return;
  await inTransaction(pool, async (client) => {
    for (const row of plain.rows) {
      const sealed = await client.query(
        "UPDATE byok_credentials SET secret = $1, sealed = 1 WHERE id = $2 AND sealed = 0",
        [box.seal(row.secret, byokContext(row.id)), row.id],
      );
      if (sealed.rowCount === 1) await notifyChange(client, { t: "byok", id: row.account_id });
    }
  });
}

/**
 * Seals provider base URLs still in plain text (from before they were sealed, or written by an
 * older gateway since), each row once however many gateways start at once.
 */
async function sealPlainBaseUrls(pool: pg.Pool, box: SecretBox): Promise<void> {
  const plain = (
    await pool.query<BaseUrlColumns & { id: string }>(
      `SELECT id, base_url, base_url_sealed, base_url_shown FROM providers
       WHERE base_url IS NOT NULL`,
    )
  ).rows.filter(holdsPlainBaseUrl);
  if (plain.length === 0) return;
  await inTransaction(pool, async (client) => {
    let changed = false;
    for (const row of plain) {
      const columns = sealedBaseUrl(row.id, row.base_url, box);
      const sealed = await client.query(
        `UPDATE providers SET base_url = $1, base_url_sealed = $2, base_url_shown = $3
         WHERE id = $4 AND base_url = $5`,
        [columns.base_url, columns.base_url_sealed, columns.base_url_shown, row.id, row.base_url],
      );
      if (sealed.rowCount === 1) changed = true;
    }
    if (changed) await notifyChange(client, { t: "catalog" });
  });
}
