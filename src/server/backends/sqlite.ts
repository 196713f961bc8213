import { existsSync, rmSync } from "node:fs";
import { secretKeyEnv } from "../../store/secret-box.js";
import { keyFileOf } from "../../store/sqlite/byok-sealing.js";
import { refuseNonDatabase, sqliteSidecars } from "../../store/sqlite/db.js";
import { keychainSealingKey, type SecretKeyStore } from "../../store/sqlite/sealing-key.js";
import { journalFileOf } from "../../store/sqlite/settlement-journal.js";
import { Store } from "../../store/sqlite/store.js";
import { ProcessLedger } from "../billing/ledger.js";
import { wireNames } from "../providers/registry.js";
import { type Backend, instanceId } from "./backend.js";
import { lockDatabase, lockFileOf, type ServeLock } from "./serve-lock.js";

/**
 * A gateway on its own SQLite file: decisions in this process, the file locked to it.
 * `journaledWaitMs`: the ledger's bound on answered settlements waiting for their transaction.
 * `secretKeyStore`: where a new database's sealing key goes when GATEWAY_SECRET_KEY_STORE is unset.
 */
export async function openSqliteBackend(
  path: string,
  journaledWaitMs: number | undefined,
  secretKeyStore: SecretKeyStore,
): Promise<Backend> {
  // Before the lock is made beside it: a path that is no database is refused as it was found.
  if (path !== ":memory:") refuseNonDatabase(path);
  const lockFound = existsSync(lockFileOf(path));
  // Before the database is opened: a refused start must leave the running server's files alone.
  const lock = await lockDatabase(path);
  // Once the lock is held, when no other gateway can be making them.
  const made = madeFiles(path, lockFound);
  let store: Store;
  try {
    const sealing = await keychainSealingKey(path, process.env, undefined, secretKeyStore);
    store = new Store(
      path,
      sealing
        ? { secretKey: sealing.key, secretKeySource: sealing.source, wires: wireNames }
        : { secretKey: process.env[secretKeyEnv], wires: wireNames },
    );
  } catch (err) {
    made.remove(lock);
    throw err;
  }
  const ledger = new ProcessLedger(store, undefined, journaledWaitMs);
  let checkpointer: ReturnType<typeof store.startCheckpointer>;
  const close = async () => {
    ledger.close();
    await checkpointer?.stop();
    store.close();
  };
  return {
    kind: "sqlite",
    where: path,
    store,
    repos: store.repos,
    ledger,
    secrets: store.secrets,
    admittedSince: (since, windowMs) => store.admittedSince(since, windowMs),
    instanceId: instanceId(),
    startUpkeep() {
      checkpointer = store.startCheckpointer();
    },
    async close() {
      await close();
      lock?.release();
    },
    async abandon() {
      await close();
      made.remove(lock);
    },
  };
}

/**
 * The files a start on `path` may make (the database and SQLite's files beside it, the sealing
 * key, the settlement journal, and the lock, found or not before it was taken), as they are
 * before it; `remove` deletes those the start made, so a start refused after it opened the
 * database leaves nothing behind. A database that was there keeps everything beside it (its key,
 * its WAL): only a lock this start made goes.
 */
function madeFiles(path: string, lockFound: boolean) {
  if (path === ":memory:") return { remove: (lock: ServeLock | undefined) => lock?.release() };
  const beside = [
    path,
    ...sqliteSidecars.map((suffix) => `${path}${suffix}`),
    keyFileOf(path),
    journalFileOf(path),
  ];
  const found = new Set(beside.filter((file) => existsSync(file)));
  return {
    remove(lock: ServeLock | undefined) {
      if (!found.has(path)) {
        for (const file of beside) if (!found.has(file)) rmSync(file, { force: true });
      }
      if (lockFound) lock?.release();
      else lock?.remove();
    },
  };
}
