import type { BaseUrlColumns } from "../provider-urls.js";
import type { Repositories } from "../repositories.js";
import { type SecretBox, secretKeyEnv } from "../secret-box.js";
import { type FileIdentity, fileIdentity } from "../storage-fault.js";
import type {
  AccountPatch,
  AccountRow,
  AdmittedCount,
  ByokRow,
  Catalog,
  GatewayStore,
  KeyKind,
  KeyRow,
  KeyWithAccount,
  LedgerRepository,
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
import { SqliteAccounts } from "./accounts.js";
import { loadSecretBox, sealPlainBaseUrls, sealPlaintextByok } from "./byok-sealing.js";
import { SqliteCatalog } from "./catalog.js";
import { type Checkpointer, startCheckpointer } from "./checkpointer.js";
import { checkWires, type DB, openDatabase } from "./db.js";
import { SqliteLedger } from "./ledger.js";
import { openRepositories } from "./repositories.js";
import { SqliteUsage } from "./usage.js";

/**
 * The gateway's SQLite file and the repositories on it. One gateway process owns a database
 * file; every statement is prepared once, in a repository under src/store/sqlite/, so the
 * request path never builds SQL, and the rows it reads (catalog, accounts, keys by hash, BYOK)
 * are cached by their repository and kept current by every write.
 *
 * Money and allowance columns are written only by the Ledger, through `ledgerRepository`.
 */
export class Store implements GatewayStore {
  private readonly db: DB;
  /** The file `db` opened, which the checkpoint worker must find at the path. */
  private readonly opened: FileIdentity | undefined;
  private readonly accounts: SqliteAccounts;
  private readonly catalog: SqliteCatalog;
  private readonly usage: SqliteUsage;
  /** The Ledger's repository: money, allowance counts, the request log and the journal's mark. */
  readonly ledgerRepository: LedgerRepository;
  /** Everything else the gateway keeps: jobs, device codes, sessions, files, threads ... */
  readonly repos: Repositories;
  /** The database's secret key: what it seals (BYOK credentials, compactions) only it opens. */
  readonly secrets: SecretBox;
  /**
   * Land the writes a ledger queued (`onQueuedWrites`): run before the cached rows are dropped
   * and before the request log is read.
   */
  private readonly queuedWrites: (() => void)[] = [];
  private readonly runInTransaction: ReturnType<DB["transaction"]>;

  /**
   * `secretKey` (base64, 32 bytes) seals BYOK credentials and base URLs carrying one, from
   * `secretKeySource` (the environment unless said); else `<path>.key` holds the key.
   */
  constructor(
    readonly path: string,
    options: { secretKey?: string; secretKeySource?: string; wires?: readonly string[] } = {
      secretKey: process.env[secretKeyEnv],
    },
  ) {
    this.db = openDatabase(path);
    this.opened = path === ":memory:" ? undefined : fileIdentity(path);
    if (options.wires) checkWires(this.db, options.wires);
    try {
      const secrets = loadSecretBox(this.db, path, options.secretKey, options.secretKeySource);
      this.secrets = secrets;
      sealPlaintextByok(this.db, secrets);
      sealPlainBaseUrls(this.db, secrets);
      this.accounts = new SqliteAccounts(this.db, secrets);
      this.catalog = new SqliteCatalog(this.db, secrets);
    } catch (err) {
      this.db.close();
      throw err;
    }
    this.runInTransaction = this.db.transaction((fn: () => unknown) => fn());
    this.usage = new SqliteUsage(this.db);
    this.ledgerRepository = new SqliteLedger(this.db, this.accounts, (fn) => this.transaction(fn));
    this.repos = openRepositories(this.db, this.accounts, () => this.landQueuedWrites());
  }

  /**
   * @internal The SQLite connection, for tests that must reach the live connection itself (a full
   * disk is simulated by capping its pages): every SQL statement lives in a repository.
   */
  get database(): DB {
    return this.db;
  }

  /** Checkpoints the WAL off the event loop (a file database only). */
  startCheckpointer(): Checkpointer | undefined {
    return this.path === ":memory:"
      ? undefined
      : startCheckpointer(this.db, this.path, undefined, this.opened);
  }

  /**
   * `hook` commits the writes a ledger queued (answered, and durable in its journal, but not yet
   * in the database): it runs before cached rows are dropped and before the request log is read.
   */
  onQueuedWrites(hook: () => void): void {
    this.queuedWrites.push(hook);
  }

  private landQueuedWrites(): void {
    for (const hook of this.queuedWrites) hook();
  }

  /**
   * Every later write on this connection fails (SQLITE_READONLY): its file was deleted or
   * replaced, and what would be written there is lost.
   */
  stopWrites(): void {
    this.db.pragma("query_only = ON");
  }

  close(): void {
    this.db.close();
  }

  /** BEGIN IMMEDIATE ... COMMIT around `fn`; one wrapper serves every call. */
  transaction<T>(fn: () => T): T {
    return this.runInTransaction.immediate(fn) as T;
  }

  /** After a config is applied: every cached row may have changed. */
  invalidateAll(): void {
    this.landQueuedWrites();
    this.catalog.forget();
    this.accounts.forget();
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

  createAccount(input: NewAccount): AccountRow {
    return this.accounts.createAccount(input);
  }

  updateAccount(id: string, patch: AccountPatch<ProfileColumn>): Promise<boolean> {
    return Promise.resolve(this.accounts.updateAccount(id, patch));
  }

  setAccountStatus(id: string, status: AccountRow["status"]): Promise<boolean> {
    return Promise.resolve(this.accounts.setAccountStatus(id, status));
  }

  /** The cached row is the committed one plus this process's queued settlements: the truth here. */
  readAccount(id: string): AccountRow | undefined {
    return this.accounts.getAccount(id);
  }

  readAccounts(): AccountRow[] {
    return this.accounts.listAccounts().map((row) => this.accounts.getAccount(row.id) ?? row);
  }

  findKeyByValue(value: string): KeyWithAccount | undefined {
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
  }): { key: KeyRow; value: string } {
    return this.accounts.createKey(input);
  }

  getKey(id: string): KeyRow | undefined {
    return this.accounts.getKey(id);
  }

  listKeys(accountId: string): KeyRow[] {
    return this.accounts.listKeys(accountId);
  }

  listToolKeys(accountId: string): KeyRow[] {
    return this.accounts.listToolKeys(accountId);
  }

  revokeKey(id: string, now?: number): Promise<boolean> {
    return Promise.resolve(this.accounts.revokeKey(id, now));
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
  ): ByokRow {
    return this.accounts.addByok(accountId, providerId, secret, label, now);
  }

  deleteByok(accountId: string, id: string): Promise<boolean> {
    return Promise.resolve(this.accounts.deleteByok(accountId, id));
  }

  markByokRefused(accountId: string, id: string, at: number | null): Promise<void> {
    this.accounts.markByokRefused(accountId, id, at);
    return Promise.resolve();
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

  // ---- usage: the request log, with the ledger's queued writes landed first ----

  usageSummary(accountId: string, since: number): UsageSummary {
    this.landQueuedWrites();
    return this.usage.usageSummary(accountId, since);
  }

  usageDaily(accountId: string, since: number): UsageDay[] {
    this.landQueuedWrites();
    return this.usage.usageDaily(accountId, since);
  }

  usageByModel(accountId: string, since: number): UsageByModel[] {
    this.landQueuedWrites();
    return this.usage.usageByModel(accountId, since);
  }

  recentRequests(accountId: string, limit: number): RecentRequest[] {
    this.landQueuedWrites();
    return this.usage.recentRequests(accountId, limit);
  }

  requestPage(accountId: string, page: PageQuery): RequestPage | undefined {
    this.landQueuedWrites();
    return this.usage.requestPage(accountId, page);
  }

  requestLog(accountId: string, limit: number): RequestLogRow[] {
    this.landQueuedWrites();
    return this.usage.requestLog(accountId, limit);
  }

  requestOf(accountId: string, id: string): RequestLogRow | undefined {
    this.landQueuedWrites();
    return this.usage.requestOf(accountId, id);
  }

  /** Read through the ledger: its count includes the settlements it has queued. */
  freeTokensUsed(model: string, windowSeconds: number, now: number): number {
    return this.ledgerRepository.freeTokensUsed(model, windowSeconds, now);
  }

  /** Requests admitted from `since` on, per window of `windowMs` (see `AdmittedCount`). */
  admittedSince(since: number, windowMs: number): AdmittedCount[] {
    this.landQueuedWrites();
    return this.usage.admittedSince(since, windowMs);
  }

  latestRecordedAt(): number {
    this.landQueuedWrites();
    return this.usage.latestRecordedAt();
  }
}
