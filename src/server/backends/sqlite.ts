import { secretKeyEnv } from "../../store/secret-box.js";
import { keychainSealingKey } from "../../store/sqlite/sealing-key.js";
import { Store } from "../../store/sqlite/store.js";
import { ProcessLedger } from "../billing/ledger.js";
import { wireNames } from "../providers/registry.js";
import { type Backend, instanceId } from "./backend.js";
import { lockDatabase } from "./serve-lock.js";

/**
 * A gateway on its own SQLite file: decisions in this process, the file locked to it.
 * `journaledWaitMs`: the ledger's bound on answered settlements waiting for their transaction.
 */
export async function openSqliteBackend(path: string, journaledWaitMs?: number): Promise<Backend> {
  // Before the database is opened: a refused start must leave the running server's files alone.
  const lock = await lockDatabase(path);
  let store: Store;
  try {
    const sealing = await keychainSealingKey(path);
    store = new Store(
      path,
      sealing
        ? { secretKey: sealing.key, secretKeySource: sealing.source, wires: wireNames }
        : { secretKey: process.env[secretKeyEnv], wires: wireNames },
    );
  } catch (err) {
    lock?.release();
    throw err;
  }
  const ledger = new ProcessLedger(store, undefined, journaledWaitMs);
  let checkpointer: ReturnType<typeof store.startCheckpointer>;
  return {
    kind: "sqlite",
    where: path,
    store,
    repos: store.repos,
    ledger,
    instanceId: instanceId(),
    startUpkeep() {
      checkpointer = store.startCheckpointer();
    },
    async close() {
      ledger.close();
      await checkpointer?.stop();
      store.close();
      lock?.release();
    },
  };
}
