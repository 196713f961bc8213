import { existsSync } from "node:fs";
import { resolve } from "node:path";
import Database from "better-sqlite3";
import {
  keychainService,
  keychainTimeoutMs,
  openKeychain,
  readKeychain,
  withTimeout,
} from "../os-keychain.js";
import { SecretBox, SecretKeyError, secretKeyEnv } from "../secret-box.js";
import { keyFileOf } from "./byok-sealing.js";
import { canBeDatabase } from "./db.js";

/**
 * Where a SQLite database's BYOK sealing key lives, in order:
 *   1. GATEWAY_SECRET_KEY, when set (it overrides everything; nothing is stored);
 *   2. `<db>.key` beside the database, when that file exists: a database sealed before the
 *      keychain was used keeps its file (it is not moved, so a copy of the folder with its key
 *      still opens where no keychain is);
 *   3. the OS keychain (service "model-gateway", one entry per database path), created there for
 *      a new database;
 *   4. a new `<db>.key`, when no keychain works: announced with one log line, since anyone who
 *      can read the folder can then open the BYOK keys.
 * GATEWAY_SECRET_KEY_STORE=file skips the keychain; =keychain refuses to start without one; =auto
 * (what `gateway serve` and the CLI do when it is unset) is the order above.
 *
 * A gateway started from code (the test kit) with the variable unset writes nothing to the
 * keychain and prints nothing: a suite's temporary databases would otherwise leave one entry each
 * behind, or print the no-keychain line at every start. Its new database gets a silent `<db>.key`
 * (the file a restart on it reads); a database already sealed with no key file beside it still
 * opens with the key a server (or an earlier version of the kit) left in the keychain, read only.
 */
export const secretKeyStoreEnv = "GATEWAY_SECRET_KEY_STORE";

export interface SealingKey {
  key: string;
  /** Where it came from, for the errors that name it. */
  source: string;
}

/** What GATEWAY_SECRET_KEY_STORE names, or "kit": a gateway started from code, with it unset. */
export type SecretKeyStore = "auto" | "file" | "keychain" | "kit";

function modeOf(raw: string | undefined, unset: SecretKeyStore): SecretKeyStore {
  const value = raw?.trim().toLowerCase();
  if (!value) return unset;
  if (value === "auto" || value === "file" || value === "keychain") return value;
  throw new SecretKeyError(
    `${secretKeyStoreEnv} must be "auto", "file" or "keychain", got "${raw}"`,
  );
}

/** The keychain entry that holds a database's sealing key. */
export function sealingKeyAccount(dbPath: string): string {
  return `byok-sealing-key:${resolve(dbPath)}`;
}

export const keychainSource = `the OS keychain (service "${keychainService}")`;

/**
 * The sealing key from the OS keychain for `dbPath`, creating it there for a new database; or
 * undefined when the key is the environment's or the file's (the Store reads or creates those).
 * `unset`: the store when GATEWAY_SECRET_KEY_STORE does not name one.
 */
export async function keychainSealingKey(
  dbPath: string,
  env: NodeJS.ProcessEnv = process.env,
  log: (line: string) => void = (line) => console.error(line),
  unset: SecretKeyStore = "auto",
): Promise<SealingKey | undefined> {
  if (env[secretKeyEnv] || dbPath === ":memory:" || dbPath === "") return undefined;
  const mode = modeOf(env[secretKeyStoreEnv], unset);
  const file = keyFileOf(dbPath);
  if (mode === "file" || existsSync(file)) return undefined;
  // A path that is no database (a directory, another kind of file) is refused when the Store
  // opens it, in one line: no key is looked for, and no key file is announced that is never made.
  if (!canBeDatabase(dbPath)) return undefined;
  if (mode === "kit") {
    if (!sealedAlready(dbPath)) return undefined;
    const stored = await readKeychain(keychainService, sealingKeyAccount(dbPath));
    // Found nowhere: the Store says which key is missing.
    return stored ? { key: stored, source: keychainSource } : undefined;
  }
  const opened = await openKeychain();
  if (!opened.ok) {
    if (mode === "keychain") {
      throw new SecretKeyError(
        `${secretKeyStoreEnv}=keychain but no OS keychain is available (${opened.reason})`,
      );
    }
    // Sealed already, with its key neither in the file nor in the environment: the key may be in
    // the keychain, locked or not answering now. A new key file would open nothing.
    if (sealedAlready(dbPath)) {
      throw new SecretKeyError(
        `the BYOK sealing key of ${dbPath} is not in ${file} or ${secretKeyEnv}, and the OS keychain, which may hold it, could not be read (${opened.reason}); unlock the keychain and try again, or restore ${file}, or set ${secretKeyEnv}`,
      );
    }
    log(
      `gateway: no OS keychain available (${opened.reason}); the BYOK sealing key is kept in ${file} beside the database (set ${secretKeyEnv} to keep it elsewhere)`,
    );
    return undefined;
  }
  const entry = opened.keyring.entry(keychainService, sealingKeyAccount(dbPath));
  const stored = await withTimeout(entry.getPassword(), keychainTimeoutMs);
  if (stored) return { key: stored, source: keychainSource };
  // Sealed with a key that is nowhere now: the Store says so, rather than a new key that opens nothing.
  if (sealedAlready(dbPath)) return undefined;
  const key = SecretBox.random().encoded();
  await withTimeout(entry.setPassword(key), keychainTimeoutMs);
  return { key, source: keychainSource };
}

/** Whether the database already holds the check of a sealing key. */
function sealedAlready(dbPath: string): boolean {
  if (!existsSync(dbPath)) return false;
  let db: Database.Database | undefined;
  try {
    db = new Database(dbPath, { readonly: true, fileMustExist: true });
    return db.prepare("SELECT 1 FROM secret_key_check WHERE id = 1").get() !== undefined;
  } catch {
    return false;
  } finally {
    db?.close();
  }
}
