import type { Statement } from "better-sqlite3";
import { keyWithAccount, mintKeyRow, type NewKeyRow } from "../key-rows.js";
import { byokContext, type SecretBox } from "../secret-box.js";
import { hashSecret, newId } from "../secrets.js";
import {
  type AccountPatch,
  type AccountRow,
  type ByokRow,
  type KeyKind,
  type KeyRow,
  type KeyWithAccount,
  type MoneyColumn,
  type NewAccount,
  type ProfileColumn,
  pickColumns,
  profileColumns,
} from "../types.js";
import type { DB } from "./db.js";

const keyColumns =
  "id, account_id, prefix, label, kind, parent_key_id, created_at, last_used_at, revoked_at";

/** What other repositories may do to key rows, inside their own transactions. */
export type KeyRowWriter = Pick<SqliteAccounts, "insertKeyRow" | "revokeKey">;

/**
 * Accounts, keys and BYOK rows on SQLite, and the one cache of them. One gateway process owns a
 * database file and every write goes through here, so the rows the request path reads are kept
 * in memory and updated or dropped by each write: a revocation or suspension is seen by the very
 * next request without a query per request. The Ledger's repository changes the money columns of
 * a cached row through `changeMoney`, as settlements are queued.
 */
export class SqliteAccounts {
  private readonly statements: ReturnType<typeof prepare>;
  private readonly accounts = new Map<string, AccountRow>();
  /** Known keys by hash. Misses are not cached, so random keys cannot grow it. */
  private readonly keysByHash = new Map<string, KeyRow>();
  /** Opened once per account when first needed; the database holds them sealed only. */
  private readonly byok = new Map<string, ByokRow[]>();

  constructor(
    private readonly db: DB,
    private readonly secrets: SecretBox,
  ) {
    this.statements = prepare(db);
  }

  /** After a config is applied or the ledger's writes failed: every cached row may have changed. */
  forget(): void {
    this.accounts.clear();
    this.keysByHash.clear();
    this.byok.clear();
  }

  // ---- accounts ---------------------------------------------------------

  getAccount(id: string): AccountRow | undefined {
    let account = this.accounts.get(id);
    if (!account) {
      account = this.statements.accountById.get(id) as AccountRow | undefined;
      if (account) this.accounts.set(id, account);
    }
    return account;
  }

  listAccounts(): AccountRow[] {
    return this.statements.allAccounts.all() as AccountRow[];
  }

  accountCount(): number {
    return (this.statements.accountCount.get() as { n: number }).n;
  }

  createAccount(input: NewAccount): AccountRow {
    this.statements.insertAccount.run({ ...input });
    return this.getAccount(input.id)!;
  }

  updateAccount(id: string, patch: AccountPatch<ProfileColumn>): boolean {
    return this.writeColumns(id, pickColumns(patch, profileColumns));
  }

  setAccountStatus(id: string, status: AccountRow["status"]): boolean {
    return this.writeColumns(id, { status });
  }

  /**
   * Writes the columns given and copies them into the cached row, whose other columns (money the
   * ledger has not committed yet) stay as they are. The caller chose and validated the columns.
   */
  writeColumns(id: string, patch: AccountPatch): boolean {
    const entries = Object.entries(patch);
    if (entries.length === 0) return this.getAccount(id) !== undefined;
    const sql = `UPDATE accounts SET ${entries.map(([column]) => `${column} = @${column}`).join(", ")} WHERE id = @id`;
    const changed = this.db.prepare(sql).run({ ...patch, id }).changes > 0;
    const cached = this.accounts.get(id);
    if (cached) Object.assign(cached, patch);
    return changed;
  }

  /** The ledger's change to the money of a cached row, made when it is queued, before it commits. */
  changeMoney(id: string, change: Partial<Pick<AccountRow, MoneyColumn>>): void {
    const account = this.getAccount(id);
    if (account) Object.assign(account, change);
  }

  // ---- keys -------------------------------------------------------------

  findKeyByValue(value: string): KeyWithAccount | undefined {
    const hash = hashSecret(value);
    let key = this.keysByHash.get(hash);
    if (!key) {
      key = this.statements.keyByHash.get(hash) as KeyRow | undefined;
      if (!key) return undefined;
      this.keysByHash.set(hash, key);
    }
    const account = this.getAccount(key.account_id);
    return keyWithAccount(key, account?.status ?? "suspended");
  }

  isAdminKey(value: string): boolean {
    return this.statements.adminByHash.get(hashSecret(value)) !== undefined;
  }

  touchKey(id: string, now: number): void {
    this.statements.touchKey.run(now, id);
    for (const key of this.keysByHash.values()) if (key.id === id) key.last_used_at = now;
  }

  createKey(input: {
    accountId: string;
    label: string;
    kind: KeyKind;
    parentKeyId?: string | null;
    now?: number;
  }): { key: KeyRow; value: string } {
    const { value, row } = mintKeyRow(input);
    this.insertKeyRow(row);
    return { key: this.getKey(row.id)!, value };
  }

  /** A key whose value was made elsewhere (a device login seals it for its one pickup). */
  insertKeyRow(row: NewKeyRow): void {
    this.statements.insertKey.run({
      id: row.id,
      account_id: row.accountId,
      hash: row.hash,
      prefix: row.prefix,
      label: row.label,
      kind: row.kind,
      parent_key_id: row.parentKeyId,
      created_at: row.createdAt,
    });
  }

  getKey(id: string): KeyRow | undefined {
    return this.statements.keyById.get(id) as KeyRow | undefined;
  }

  listKeys(accountId: string): KeyRow[] {
    return this.statements.keysByAccount.all(accountId) as KeyRow[];
  }

  listToolKeys(accountId: string): KeyRow[] {
    return this.statements.toolKeysByAccount.all(accountId) as KeyRow[];
  }

  revokeKey(id: string, now = Date.now()): boolean {
    const changed = this.statements.revokeKey.run(now, id).changes > 0;
    this.keysByHash.clear();
    return changed;
  }

  // ---- BYOK -------------------------------------------------------------

  listByok(accountId: string): ByokRow[] {
    let rows = this.byok.get(accountId);
    if (!rows) {
      rows = [];
      for (const row of this.statements.byokByAccount.all(accountId) as ByokRow[]) {
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

  addByok(
    accountId: string,
    providerId: string,
    secret: string,
    label: string,
    now: number,
  ): ByokRow {
    const id = newId("byok");
    const position =
      (this.statements.maxByokPosition.get(accountId) as { p: number | null }).p ?? -1;
    this.statements.insertByok.run(
      id,
      accountId,
      providerId,
      this.sealByok(id, secret),
      label,
      position + 1,
      now,
    );
    this.byok.delete(accountId);
    return { ...(this.statements.byokById.get(id) as ByokRow), secret };
  }

  deleteByok(accountId: string, id: string): boolean {
    this.byok.delete(accountId);
    return this.statements.deleteByok.run(id, accountId).changes > 0;
  }

  markByokRefused(accountId: string, id: string, at: number | null): void {
    if (this.statements.markByokRefused.run({ at, id, accountId }).changes > 0) {
      this.byok.delete(accountId);
    }
  }

  sealByok(id: string, secret: string): string {
    return this.secrets.seal(secret, byokContext(id));
  }
}

function prepare(db: DB) {
  const statement = (sql: string): Statement => db.prepare(sql);
  return {
    keyByHash: statement(`SELECT ${keyColumns} FROM api_keys WHERE hash = ?`),
    adminByHash: statement("SELECT id FROM admin_keys WHERE hash = ?"),
    touchKey: statement("UPDATE api_keys SET last_used_at = ? WHERE id = ?"),
    insertKey: statement(
      `INSERT INTO api_keys (id, account_id, hash, prefix, label, kind, parent_key_id, created_at)
       VALUES (@id, @account_id, @hash, @prefix, @label, @kind, @parent_key_id, @created_at)`,
    ),
    keyById: statement(`SELECT ${keyColumns} FROM api_keys WHERE id = ?`),
    keysByAccount: statement(
      `SELECT ${keyColumns} FROM api_keys WHERE account_id = ? ORDER BY created_at, id`,
    ),
    toolKeysByAccount: statement(
      `SELECT ${keyColumns} FROM api_keys
       WHERE account_id = ? AND parent_key_id IS NOT NULL ORDER BY created_at, id`,
    ),
    revokeKey: statement("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"),
    accountById: statement("SELECT * FROM accounts WHERE id = ?"),
    allAccounts: statement("SELECT * FROM accounts ORDER BY created_at, id"),
    accountCount: statement("SELECT count(*) AS n FROM accounts"),
    insertAccount: statement(
      `INSERT INTO accounts (id, name, balance_micro, rpm_limit, tier, payg_window_start, created_at)
       VALUES (@id, @name, @balanceMicro, @rpmLimit, @tier, @now, @now)`,
    ),
    maxByokPosition: statement(
      "SELECT max(position) AS p FROM byok_credentials WHERE account_id = ?",
    ),
    insertByok: statement(
      "INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
    ),
    byokById: statement("SELECT * FROM byok_credentials WHERE id = ?"),
    deleteByok: statement("DELETE FROM byok_credentials WHERE id = ? AND account_id = ?"),
    // A mark already there keeps the time of the first refusal.
    markByokRefused: statement(
      `UPDATE byok_credentials SET refused_at = CASE WHEN @at IS NULL THEN NULL
         ELSE coalesce(refused_at, @at) END
       WHERE id = @id AND account_id = @accountId`,
    ),
    byokByAccount: statement(
      "SELECT * FROM byok_credentials WHERE account_id = ? ORDER BY position, created_at",
    ),
  };
}
