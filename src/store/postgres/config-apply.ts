import type pg from "pg";
import {
  type ConfigApplyRepository,
  type ConfigRows,
  type ConfigTables,
  configRemovals,
  configUpserts,
} from "../config-apply.js";
import { notifyChange } from "./notify.js";
import { inTransaction, lockFor } from "./transaction.js";

/** A statement written with `@name` parameters, as Postgres's `$n` and the values to bind. */
interface NamedStatement {
  name: string;
  text: string;
  bind(row: Record<string, unknown>): unknown[];
}

function named(name: string, text: string): NamedStatement {
  const order: string[] = [];
  const positional = text.replace(/@(\w+)/g, (_, parameter: string) => {
    if (!order.includes(parameter)) order.push(parameter);
    return `$${order.indexOf(parameter) + 1}`;
  });
  return {
    name,
    text: positional,
    bind: (row) =>
      order.map((parameter) => {
        if (!(parameter in row)) throw new Error(`${name}: no value for @${parameter}`);
        return row[parameter];
      }),
  };
}

const upsertProvider = named("config_upsert_provider", configUpserts.provider);
const upsertModel = named("config_upsert_model", configUpserts.model);
const upsertRoute = named("config_upsert_route", configUpserts.route);
const upsertTier = named("config_upsert_tier", configUpserts.tier);
const upsertAccount = named("config_upsert_account", configUpserts.account);
const upsertKey = named("config_upsert_key", configUpserts.key);

/** Each table's key: the order `tables()` lists rows in, byte by byte as SQLite compares text. */
const tableKeys: Record<keyof ConfigTables, string> = {
  accounts: "id",
  api_keys: "id",
  providers: "id",
  models: "name",
  routes: "name",
  tiers: "name",
  admin_keys: "id",
  byok_credentials: "id",
};

/**
 * Applying a config on Postgres (see ConfigApplyRepository). Gateways starting at once apply
 * under a transaction-scoped advisory lock, one after the other: each sees the last one's rows,
 * so an unchanged account is skipped by all but the first.
 */
export class PostgresConfigApply implements ConfigApplyRepository {
  constructor(private readonly pool: pg.Pool) {}

  async apply(rows: ConfigRows): Promise<void> {
    const { now } = rows;
    await inTransaction(this.pool, async (client) => {
      await lockFor(client, "configApply");
      const run = (statement: NamedStatement, row: Record<string, unknown>) =>
        client.query({ name: statement.name, text: statement.text, values: statement.bind(row) });
      for (const tier of rows.tiers) await run(upsertTier, { ...tier });
      for (const provider of rows.providers) await run(upsertProvider, { ...provider });
      for (const model of rows.models) await run(upsertModel, { ...model });
      for (const route of rows.routes) await run(upsertRoute, { ...route });
      const remove = (name: string, text: string, kept: string[]) =>
        client.query({ name, text, values: [JSON.stringify(kept)] });
      await remove(
        "config_remove_models",
        configRemovals.postgres.models,
        rows.models.map((model) => model.name),
      );
      await remove(
        "config_remove_routes",
        configRemovals.postgres.routes,
        rows.routes.map((route) => route.name),
      );
      const stored = await client.query<{ id: string; config_hash: string | null }>({
        name: "config_account_hashes",
        text: "SELECT id, config_hash FROM accounts WHERE id = ANY($1)",
        values: [rows.accounts.map((account) => account.id)],
      });
      const hashes = new Map(stored.rows.map((row) => [row.id, row.config_hash]));
      const changed = rows.accounts.filter(
        (account) => hashes.get(account.id) !== account.config_hash,
      );
      // Holds and settlements lock accounts in the database's order of their ids; the apply locks
      // the ones it changes in that order too before changing any, so the two never wait for each
      // other in a cycle.
      await client.query({
        name: "config_lock_accounts",
        text: "SELECT 1 FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        values: [changed.map((account) => account.id)],
      });
      for (const { keys, byok, ...account } of changed) {
        await run(upsertAccount, { ...account, now });
        for (const key of keys) await run(upsertKey, { ...key, account_id: account.id, now });
        if (byok) {
          await client.query({
            name: "config_delete_byok",
            text: "DELETE FROM byok_credentials WHERE account_id = $1",
            values: [account.id],
          });
          for (const [position, credential] of byok.entries()) {
            await client.query({
              name: "config_insert_byok",
              text: `INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed)
                VALUES ($1, $2, $3, $4, $5, $6, $7, 1)`,
              values: [
                credential.id,
                account.id,
                credential.provider_id,
                credential.secret,
                credential.label,
                position,
                now,
              ],
            });
          }
        }
      }
      for (const admin of rows.adminKeys) {
        await client.query({
          name: "config_insert_admin",
          text: "INSERT INTO admin_keys (id, hash, created_at) VALUES ($1, $2, $3) ON CONFLICT (hash) DO NOTHING",
          values: [admin.id, admin.hash, now],
        });
      }
      await remove(
        "config_remove_admin_keys",
        configRemovals.postgres.adminKeys,
        rows.adminKeys.map((admin) => admin.hash),
      );
      // Any row any gateway keeps in memory may have changed: each reads everything again.
      await notifyChange(client, { t: "all" });
    });
  }

  async tables(): Promise<ConfigTables> {
    const read = async (table: keyof ConfigTables) =>
      (
        await this.pool.query({
          name: `config_rows_${table}`,
          text: `SELECT * FROM ${table} ORDER BY ${tableKeys[table]} COLLATE "C"`,
        })
      ).rows;
    return {
      accounts: await read("accounts"),
      api_keys: await read("api_keys"),
      providers: await read("providers"),
      models: await read("models"),
      routes: await read("routes"),
      tiers: await read("tiers"),
      admin_keys: await read("admin_keys"),
      byok_credentials: await read("byok_credentials"),
    };
  }
}
