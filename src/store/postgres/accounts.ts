import type pg from "pg";
import { keyWithAccount, mintKeyRow } from "../key-rows.js";
import { byokContext, type SecretBox } from "../secret-box.js";
import { hashSecret, newId } from "../secrets.js";
import {
  type AccountPatch,
  type AccountRepository,
  type AccountRow,
  type ByokRow,
  type KeyKind,
  type KeyRow,
  type KeyWithAccount,
  type NewAccount,
  type ProfileColumn,
  pickColumns,
  profileColumns,
} from "../types.js";
import type { PostgresKeyRowWriter } from "./key-rows.js";
import { type ChangeFeed, notifyChange } from "./notify.js";
import { inTransaction } from "./transaction.js";

/** The columns of AccountRow: the holds' columns are the money core's, never cached. */
const accountColumns = `id, name, status, balance_micro, rpm_limit, tier, payg_enabled, payg_limit_micro,
  payg_window_seconds, payg_window_start, payg_spent_micro, subscription_json,
  subscription_started_at, created_at`;
const keyColumns =
  "id, account_id, prefix, label, kind, parent_key_id, created_at, last_used_at, revoked_at";
const byokColumns = "id, account_id, provider_id, secret, label, position, created_at, refused_at";

type StoredKeyRow = KeyRow & { hash: string };

/** What the request path reads, built whole by a full read and swapped in at once. */
interface Mirror {
  accounts: Map<string, AccountRow>;
  keys: Map<string, StoredKeyRow>;
  keyIdsByHash: Map<string, string>;
  adminHashes: Set<string>;
  /** Each account's credentials, opened, in order. */
  byok: Map<string, ByokRow[]>;
}

const emptyMirror = (): Mirror => ({
  accounts: new Map(),
  keys: new Map(),
  keyIdsByHash: new Map(),
  adminHashes: new Set(),
  byok: new Map(),
});

/** Rows in the order SQLite lists them: by creation time, then id byte by byte. */
const byCreation = (a: { created_at: number; id: string }, b: { created_at: number; id: string }) =>
  a.created_at - b.created_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

function keyRowOf(stored: StoredKeyRow): KeyRow {
  const { hash: _hash, ...row } = stored;
  return row;
}

/**
 * Accounts, keys, admin keys and BYOK credentials on Postgres, with every row the request path
 * reads held in memory: several gateways write the same rows, so each write announces what it
 * changed (`ChangeFeed`) and every gateway reads that again. A key not in memory is looked up in
 * the database (another gateway may have minted it a moment ago); misses are not remembered, so
 * random keys cannot grow memory.
 */
export class PostgresAccounts implements AccountRepository {
  private mirror = emptyMirror();
  /** Writes of key uses in flight, which a listing waits for: it shows what this process recorded. */
  private readonly touches = new Set<Promise<void>>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly secrets: SecretBox,
    private readonly changes: ChangeFeed,
    private readonly keyRows: PostgresKeyRowWriter,
  ) {}

  // ---- reading the database into memory -------------------------------------

  async readAll(): Promise<void> {
    const [accounts, keys, admins, byok] = await Promise.all([
      this.pool.query<AccountRow>(`SELECT ${accountColumns} FROM accounts`),
      this.pool.query<StoredKeyRow>(`SELECT ${keyColumns}, hash FROM api_keys`),
      this.pool.query<{ hash: string }>("SELECT hash FROM admin_keys"),
      this.pool.query<ByokRow>(
        `SELECT ${byokColumns} FROM byok_credentials ORDER BY account_id, position, created_at`,
      ),
    ]);
    const mirror = emptyMirror();
    for (const account of accounts.rows) mirror.accounts.set(account.id, account);
    for (const key of keys.rows) {
      mirror.keys.set(key.id, key);
      mirror.keyIdsByHash.set(key.hash, key.id);
    }
    for (const admin of admins.rows) mirror.adminHashes.add(admin.hash);
    for (const row of byok.rows) {
      const opened = this.openByok(row);
      const list = mirror.byok.get(row.account_id) ?? [];
      if (opened) list.push(opened);
      mirror.byok.set(row.account_id, list);
    }
    this.mirror = mirror;
  }

  async readAccountRow(id: string): Promise<void> {
    const row = await this.selectAccount(id);
    if (row) this.remember(row);
    else this.mirror.accounts.delete(id);
  }

  async readKeyRow(id: string): Promise<void> {
    const result = await this.pool.query<StoredKeyRow>({
      name: "pg_accounts_key_by_id",
      text: `SELECT ${keyColumns}, hash FROM api_keys WHERE id = $1`,
      values: [id],
    });
    const { keys, keyIdsByHash } = this.mirror;
    const old = keys.get(id);
    if (old) keyIdsByHash.delete(old.hash);
    const row = result.rows[0];
    if (!row) {
      keys.delete(id);
      return;
    }
    keys.set(id, row);
    keyIdsByHash.set(row.hash, id);
  }

  async readByokRows(accountId: string): Promise<void> {
    const result = await this.pool.query<ByokRow>({
      name: "pg_accounts_byok_by_account",
      text: `SELECT ${byokColumns} FROM byok_credentials WHERE account_id = $1 ORDER BY position, created_at`,
      values: [accountId],
    });
    const opened = result.rows.flatMap((row) => this.openByok(row) ?? []);
    if (opened.length > 0) this.mirror.byok.set(accountId, opened);
    else this.mirror.byok.delete(accountId);
  }

  private openByok(row: ByokRow): ByokRow | undefined {
    const secret = this.secrets.open(row.secret, byokContext(row.id));
    // Start-up checked the key, so only an altered row gets here: it is left out, never sent
    // upstream as garbage.
    if (secret === undefined) {
      console.error(`byok credential ${row.id} does not open; skipped`);
      return undefined;
    }
    return { ...row, secret };
  }

  private async selectAccount(id: string): Promise<AccountRow | undefined> {
    const result = await this.pool.query<AccountRow>({
      name: "pg_accounts_by_id",
      text: `SELECT ${accountColumns} FROM accounts WHERE id = $1`,
      values: [id],
    });
    return result.rows[0];
  }

  /** The cached row keeps its identity: whoever holds it sees the new values. */
  private remember(row: AccountRow): void {
    const cached = this.mirror.accounts.get(row.id);
    if (cached) Object.assign(cached, row);
    else this.mirror.accounts.set(row.id, row);
  }

  // ---- accounts ---------------------------------------------------------------

  getAccount(id: string): AccountRow | undefined {
    return this.mirror.accounts.get(id);
  }

  listAccounts(): AccountRow[] {
    return [...this.mirror.accounts.values()].sort(byCreation);
  }

  accountCount(): number {
    return this.mirror.accounts.size;
  }

  async readAccounts(): Promise<AccountRow[]> {
    // Ordered as listAccounts orders the cached rows: ids compared byte by byte.
    const result = await this.pool.query<AccountRow>({
      name: "pg_accounts_all",
      text: `SELECT ${accountColumns} FROM accounts ORDER BY created_at, id COLLATE "C"`,
    });
    for (const row of result.rows) this.remember(row);
    return result.rows.map((row) => ({ ...row }));
  }

  async readAccount(id: string): Promise<AccountRow | undefined> {
    const row = await this.selectAccount(id);
    if (!row) return undefined;
    this.remember(row);
    return { ...row };
  }

  async createAccount(input: NewAccount): Promise<AccountRow> {
    const created = await this.changes.publish({ t: "account", id: input.id }, (nonce) =>
      inTransaction(this.pool, async (client) => {
        const result = await client.query<AccountRow>({
          name: "pg_accounts_insert",
          text: `INSERT INTO accounts (id, name, balance_micro, rpm_limit, tier, payg_window_start, created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING ${accountColumns}`,
          values: [input.id, input.name, input.balanceMicro, input.rpmLimit, input.tier, input.now],
        });
        await notifyChange(client, { t: "account", id: input.id }, nonce);
        return result.rows[0];
      }),
    );
    return this.getAccount(input.id) ?? created;
  }

  updateAccount(id: string, patch: AccountPatch<ProfileColumn>): Promise<boolean> {
    return this.writeColumns(id, pickColumns(patch, profileColumns));
  }

  setAccountStatus(id: string, status: AccountRow["status"]): Promise<boolean> {
    return this.writeColumns(id, { status });
  }

  /** Writes the columns given (names from `profileColumns`, never from a caller's text). */
  private async writeColumns(id: string, patch: AccountPatch<ProfileColumn>): Promise<boolean> {
    const entries = Object.entries(patch);
    if (entries.length === 0) return this.getAccount(id) !== undefined;
    const assignments = entries.map(([column], index) => `${column} = $${index + 2}`).join(", ");
    return this.changes.publish(
      { t: "account", id },
      (nonce) =>
        inTransaction(this.pool, async (client) => {
          const result = await client.query({
            text: `UPDATE accounts SET ${assignments} WHERE id = $1`,
            values: [id, ...entries.map(([, value]) => value)],
          });
          if (result.rowCount !== 1) return false;
          await notifyChange(client, { t: "account", id }, nonce);
          return true;
        }),
      (changed) => changed,
    );
  }

  // ---- keys -------------------------------------------------------------------

  findKeyByValue(value: string): KeyWithAccount | undefined | Promise<KeyWithAccount | undefined> {
    const hash = hashSecret(value);
    const id = this.mirror.keyIdsByHash.get(hash);
    const key = id === undefined ? undefined : this.mirror.keys.get(id);
    if (
      key &&
      this.changes.isCurrent({ t: "key", id: key.id }) &&
      this.changes.isCurrent({ t: "account", id: key.account_id })
    ) {
      return keyWithAccount(key, this.accountStatus(key.account_id));
    }
    return this.findKeyInDatabase(hash);
  }

  /**
   * A key memory does not hold, or holds with an announced change not read yet. What it finds
   * enters memory only where memory has nothing: the listener's own read, in order, settles the rest.
   */
  private async findKeyInDatabase(hash: string): Promise<KeyWithAccount | undefined> {
    const result = await this.pool.query<StoredKeyRow>({
      name: "pg_accounts_key_by_hash",
      text: `SELECT ${keyColumns}, hash FROM api_keys WHERE hash = $1`,
      values: [hash],
    });
    const key = result.rows[0];
    if (!key) return undefined;
    if (!this.mirror.keys.has(key.id)) {
      this.mirror.keys.set(key.id, key);
      this.mirror.keyIdsByHash.set(hash, key.id);
    }
    let status: AccountRow["status"] | undefined;
    if (
      this.mirror.accounts.has(key.account_id) &&
      this.changes.isCurrent({ t: "account", id: key.account_id })
    ) {
      status = this.accountStatus(key.account_id);
    } else {
      const account = await this.selectAccount(key.account_id);
      if (account && !this.mirror.accounts.has(account.id)) {
        this.mirror.accounts.set(account.id, account);
      }
      status = account?.status;
    }
    return keyWithAccount(key, status ?? "suspended");
  }

  private accountStatus(accountId: string): AccountRow["status"] {
    return this.mirror.accounts.get(accountId)?.status ?? "suspended";
  }

  isAdminKey(value: string): boolean {
    return this.mirror.adminHashes.has(hashSecret(value));
  }

  /**
   * A use is not announced: a notification per key per second of use would have every gateway
   * read the row again. Listings read the database instead, and memory's copy only spaces the
   * writes out.
   */
  touchKey(id: string, now: number): void {
    const key = this.mirror.keys.get(id);
    if (key) key.last_used_at = now;
    const write: Promise<void> = this.pool
      .query({
        name: "pg_accounts_touch_key",
        text: "UPDATE api_keys SET last_used_at = $1 WHERE id = $2",
        values: [now, id],
      })
      .then(
        () => {
          this.touches.delete(write);
        },
        (err: Error) => {
          this.touches.delete(write);
          console.error(`postgres: recording when a key was last used failed: ${err.message}`);
        },
      );
    this.touches.add(write);
  }

  async createKey(input: {
    accountId: string;
    label: string;
    kind: KeyKind;
    parentKeyId?: string | null;
    now?: number;
  }): Promise<{ key: KeyRow; value: string }> {
    const { value, row } = mintKeyRow(input);
    const { id, createdAt } = row;
    await this.changes.publish({ t: "key", id }, (nonce) =>
      inTransaction(this.pool, (client) => this.keyRows.insertKeyRow(client, row, nonce)),
    );
    const key = this.getKey(id) ?? {
      id,
      account_id: row.accountId,
      prefix: row.prefix,
      label: row.label,
      kind: row.kind,
      parent_key_id: row.parentKeyId,
      created_at: createdAt,
      last_used_at: null,
      revoked_at: null,
    };
    return { key, value };
  }

  getKey(id: string): KeyRow | undefined {
    const key = this.mirror.keys.get(id);
    return key && keyRowOf(key);
  }

  listKeys(accountId: string): Promise<KeyRow[]> {
    return this.readKeys(accountId, false);
  }

  listToolKeys(accountId: string): Promise<KeyRow[]> {
    return this.readKeys(accountId, true);
  }

  /**
   * Rows as they are in the database, ordered as SQLite orders them (ids byte by byte), once this
   * process's writes of uses are in. Memory is left alone: the listener's reads, in order, keep it.
   */
  private async readKeys(accountId: string, toolKeysOnly: boolean): Promise<KeyRow[]> {
    await Promise.all(this.touches);
    const result = await this.pool.query<KeyRow>(
      toolKeysOnly
        ? {
            name: "pg_accounts_tool_keys_by_account",
            text: `SELECT ${keyColumns} FROM api_keys WHERE account_id = $1 AND parent_key_id IS NOT NULL ORDER BY created_at, id COLLATE "C"`,
            values: [accountId],
          }
        : {
            name: "pg_accounts_keys_by_account",
            text: `SELECT ${keyColumns} FROM api_keys WHERE account_id = $1 ORDER BY created_at, id COLLATE "C"`,
            values: [accountId],
          },
    );
    return result.rows;
  }

  revokeKey(id: string, now = Date.now()): Promise<boolean> {
    return this.changes.publish(
      { t: "key", id },
      (nonce) =>
        inTransaction(this.pool, (client) => this.keyRows.revokeKey(client, id, now, nonce)),
      (revoked) => revoked,
    );
  }

  // ---- BYOK -------------------------------------------------------------------

  listByok(accountId: string): ByokRow[] {
    return this.mirror.byok.get(accountId) ?? [];
  }

  async addByok(
    accountId: string,
    providerId: string,
    secret: string,
    label: string,
    now: number,
  ): Promise<ByokRow> {
    const id = newId("byok");
    const sealed = this.sealByok(id, secret);
    const row = await this.changes.publish({ t: "byok", id: accountId }, (nonce) =>
      inTransaction(this.pool, async (client) => {
        // Two gateways adding to one account at once take turns, so positions stay distinct.
        await client.query({
          name: "pg_accounts_lock_account",
          text: "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE",
          values: [accountId],
        });
        const result = await client.query<ByokRow>({
          name: "pg_accounts_insert_byok",
          text: `INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed)
            SELECT $1::text, $2::text, $3::text, $4::text, $5::text, coalesce(max(position), -1) + 1,
                $6::bigint, 1
              FROM byok_credentials WHERE account_id = $2
            RETURNING ${byokColumns}`,
          values: [id, accountId, providerId, sealed, label, now],
        });
        await notifyChange(client, { t: "byok", id: accountId }, nonce);
        return result.rows[0];
      }),
    );
    return { ...row, secret };
  }

  deleteByok(accountId: string, id: string): Promise<boolean> {
    return this.changes.publish(
      { t: "byok", id: accountId },
      (nonce) =>
        inTransaction(this.pool, async (client) => {
          const result = await client.query({
            name: "pg_accounts_delete_byok",
            text: "DELETE FROM byok_credentials WHERE id = $1 AND account_id = $2",
            values: [id, accountId],
          });
          if (result.rowCount !== 1) return false;
          await notifyChange(client, { t: "byok", id: accountId }, nonce);
          return true;
        }),
      (deleted) => deleted,
    );
  }

  async markByokRefused(accountId: string, id: string, at: number | null): Promise<void> {
    await this.changes.publish(
      { t: "byok", id: accountId },
      (nonce) =>
        inTransaction(this.pool, async (client) => {
          // A mark already there keeps the time of the first refusal.
          const result = await client.query({
            name: "pg_accounts_mark_byok_refused",
            text: `UPDATE byok_credentials SET refused_at = CASE WHEN $3::bigint IS NULL THEN NULL
                ELSE coalesce(refused_at, $3::bigint) END
              WHERE id = $1 AND account_id = $2`,
            values: [id, accountId, at],
          });
          if (result.rowCount !== 1) return false;
          await notifyChange(client, { t: "byok", id: accountId }, nonce);
          return true;
        }),
      (marked) => marked,
    );
  }

  sealByok(id: string, secret: string): string {
    return this.secrets.seal(secret, byokContext(id));
  }
}
