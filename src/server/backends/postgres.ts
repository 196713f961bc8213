import { openPostgresPool } from "../../store/postgres/connect.js";
import { PostgresKeyPoolSync } from "../../store/postgres/key-cooldowns.js";
import { PostgresCounters } from "../../store/postgres/limit-counters.js";
import { migratePostgres } from "../../store/postgres/migrations.js";
import { PostgresMoney } from "../../store/postgres/money.js";
import { openPostgresRepositories } from "../../store/postgres/repositories.js";
import { PostgresStore } from "../../store/postgres/store.js";
import { describePostgresUrl } from "../../store/postgres/url.js";
import { secretKeyEnv } from "../../store/secret-box.js";
import { PostgresLedger } from "../billing/postgres-ledger.js";
import { wireNames } from "../providers/registry.js";
import { type Backend, instanceId } from "./backend.js";

/**
 * A gateway on a Postgres database that other gateways share: the schema is brought up to date
 * under an advisory lock, this gateway registers with a lease (its holds are released by the
 * others if it dies), and its caches follow the others' writes by LISTEN/NOTIFY.
 */
export async function openPostgresBackend(url: string, env: NodeJS.ProcessEnv): Promise<Backend> {
  const where = describePostgresUrl(url);
  const pool = openPostgresPool({ url });
  const id = instanceId();
  let store: PostgresStore | undefined;
  let money: PostgresMoney | undefined;
  let keyPools: PostgresKeyPoolSync | undefined;
  try {
    await migratePostgres(pool, { wires: wireNames });
    store = await PostgresStore.open(pool, { secretKey: env[secretKeyEnv] });
    money = new PostgresMoney(pool, { instanceId: id });
    await money.start();
    const leasing = money;
    // A balance or limit set anew is what the next request is admitted against.
    store.watchAccounts((accountId) =>
      accountId === null ? leasing.stopLeases() : leasing.stopLease(accountId),
    );
    keyPools = new PostgresKeyPoolSync(pool, { url, instanceId: id });
    await keyPools.start();
  } catch (err) {
    await money?.close().catch(() => {});
    await store?.close();
    await pool.end();
    throw err;
  }
  const ledger = new PostgresLedger(money, store, where);
  const openedStore = store;
  const openedMoney = money;
  const openedKeyPools = keyPools;
  const close = async () => {
    await ledger.close();
    await openedKeyPools.close();
    await openedMoney.close();
    await openedStore.close();
    await pool.end();
  };
  return {
    kind: "postgres",
    where,
    store,
    repos: openPostgresRepositories(pool, store.keyRows, {
      instanceId: id,
      secrets: store.secrets,
    }),
    ledger,
    secrets: store.secrets,
    counters: new PostgresCounters(pool),
    keyPoolSync: keyPools,
    instanceId: id,
    startUpkeep() {},
    close,
    // The database is shared: what its migrations made there is every gateway's.
    abandon: close,
  };
}
