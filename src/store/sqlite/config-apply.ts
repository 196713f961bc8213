import type { Statement } from "better-sqlite3";
import {
  type ConfigApplyRepository,
  type ConfigRows,
  type ConfigTables,
  configRemovals,
  configUpserts,
} from "../config-apply.js";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";

export class SqliteConfigApply implements ConfigApplyRepository {
  private readonly upsertProvider: Statement;
  private readonly upsertModel: Statement;
  private readonly upsertRoute: Statement;
  private readonly upsertTier: Statement;
  private readonly accountHash: Statement;
  private readonly upsertAccount: Statement;
  private readonly upsertKey: Statement;
  private readonly deleteByok: Statement;
  private readonly insertByok: Statement;
  private readonly insertAdmin: Statement;
  private readonly removeModels: Statement;
  private readonly removeRoutes: Statement;
  private readonly removeAdminKeys: Statement;
  private readonly everyRow: Record<keyof ConfigTables, Statement>;
  private readonly immediate: <T>(fn: () => T) => T;

  constructor(db: DB) {
    this.immediate = immediateTransactions(db);
    this.upsertProvider = db.prepare(configUpserts.provider);
    this.upsertModel = db.prepare(configUpserts.model);
    this.upsertRoute = db.prepare(configUpserts.route);
    this.upsertTier = db.prepare(configUpserts.tier);
    this.accountHash = db.prepare("SELECT config_hash FROM accounts WHERE id = ?");
    this.upsertAccount = db.prepare(configUpserts.account);
    this.upsertKey = db.prepare(configUpserts.key);
    this.deleteByok = db.prepare("DELETE FROM byok_credentials WHERE account_id = ?");
    this.insertByok = db.prepare(
      `INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed)
       VALUES (?, ?, ?, ?, ?, ?, ?, 1)`,
    );
    this.insertAdmin = db.prepare(
      "INSERT INTO admin_keys (id, hash, created_at) VALUES (?, ?, ?) ON CONFLICT(hash) DO NOTHING",
    );
    this.removeModels = db.prepare(configRemovals.sqlite.models);
    this.removeRoutes = db.prepare(configRemovals.sqlite.routes);
    this.removeAdminKeys = db.prepare(configRemovals.sqlite.adminKeys);
    const all = (table: keyof ConfigTables) => db.prepare(`SELECT * FROM ${table} ORDER BY 1`);
    this.everyRow = {
      accounts: all("accounts"),
      api_keys: all("api_keys"),
      providers: all("providers"),
      models: all("models"),
      routes: all("routes"),
      tiers: all("tiers"),
      admin_keys: all("admin_keys"),
      byok_credentials: all("byok_credentials"),
    };
  }

  async apply(rows: ConfigRows): Promise<void> {
    const { now } = rows;
    this.immediate(() => {
      for (const tier of rows.tiers) this.upsertTier.run(tier);
      for (const provider of rows.providers) this.upsertProvider.run(provider);
      for (const model of rows.models) this.upsertModel.run(model);
      for (const route of rows.routes) this.upsertRoute.run(route);
      this.removeModels.run(JSON.stringify(rows.models.map((model) => model.name)));
      this.removeRoutes.run(JSON.stringify(rows.routes.map((route) => route.name)));
      for (const { keys, byok, ...account } of rows.accounts) {
        const stored = this.accountHash.get(account.id) as
          | { config_hash: string | null }
          | undefined;
        if (stored?.config_hash === account.config_hash) continue;
        this.upsertAccount.run({ ...account, now });
        for (const key of keys) this.upsertKey.run({ ...key, account_id: account.id, now });
        if (byok) {
          this.deleteByok.run(account.id);
          byok.forEach((credential, position) => {
            this.insertByok.run(
              credential.id,
              account.id,
              credential.provider_id,
              credential.secret,
              credential.label,
              position,
              now,
            );
          });
        }
      }
      for (const admin of rows.adminKeys) this.insertAdmin.run(admin.id, admin.hash, now);
      this.removeAdminKeys.run(JSON.stringify(rows.adminKeys.map((admin) => admin.hash)));
    });
  }

  async tables(): Promise<ConfigTables> {
    const read = (table: keyof ConfigTables) => this.everyRow[table].all();
    return {
      accounts: read("accounts"),
      api_keys: read("api_keys"),
      providers: read("providers"),
      models: read("models"),
      routes: read("routes"),
      tiers: read("tiers"),
      admin_keys: read("admin_keys"),
      byok_credentials: read("byok_credentials"),
    };
  }
}
