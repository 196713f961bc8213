import { existsSync, readFileSync, renameSync, rmSync } from "node:fs";
import { writePrivateFile } from "../private-files.js";
import {
  type BaseUrlColumns,
  holdsPlainBaseUrl,
  openedBaseUrl,
  sealedBaseUrl,
} from "../provider-urls.js";
import {
  byokContext,
  newSecretKeyEnv,
  SecretBox,
  SecretKeyError,
  secretKeyEnv,
} from "../secret-box.js";
import { type DB, scrubFreedPages } from "./db.js";

/** Where the key lives when the environment does not give one: beside the database. */
export const keyFileOf = (dbPath: string) => `${dbPath}.key`;
const pendingKeyFileOf = (dbPath: string) => `${dbPath}.key.new`;

function storedCheck(db: DB): string | undefined {
  return (
    db.prepare("SELECT value FROM secret_key_check WHERE id = 1").get() as
      | { value: string }
      | undefined
  )?.value;
}

function writeCheck(db: DB, box: SecretBox): void {
  db.prepare(
    `INSERT INTO secret_key_check (id, value) VALUES (1, ?)
     ON CONFLICT(id) DO UPDATE SET value = excluded.value`,
  ).run(box.checkValue());
}

/**
 * The key that seals this database's BYOK credentials: the environment's (or the OS keychain's,
 * `sealing-key.ts`), else the key file beside the database, created on the first start. A key
 * that does not open what the database holds stops start-up with one clear error rather than
 * sending garbage upstream.
 */
export function loadSecretBox(
  db: DB,
  dbPath: string,
  envKey: string | undefined,
  /** Where `envKey` came from when not the environment (the OS keychain). */
  source = secretKeyEnv,
): SecretBox {
  const check = storedCheck(db);
  let box: SecretBox;
  let where: string;
  if (envKey) {
    box = SecretBox.parse(envKey, source);
    where = source;
  } else if (dbPath === ":memory:" || dbPath === "") {
    box = SecretBox.random();
    where = "an in-memory key";
  } else {
    const file = keyFileOf(dbPath);
    where = file;
    if (existsSync(file)) {
      box = SecretBox.parse(readFileSync(file, "utf8"), file);
      box = finishRotation(dbPath, box, check);
    } else if (check === undefined) {
      box = SecretBox.random();
      writePrivateFile(file, `${box.encoded()}\n`);
    } else {
      throw new SecretKeyError(
        `${dbPath} holds BYOK keys sealed with a key that is missing: restore ${file} or set ${secretKeyEnv}`,
      );
    }
  }
  if (check === undefined) writeCheck(db, box);
  else if (!box.opensCheck(check)) {
    // A variable set for another database hides this one's own key file: say which to unset.
    const file = keyFileOf(dbPath);
    const fileHint =
      envKey && source === secretKeyEnv && existsSync(file)
        ? `: ${file} beside it may hold that key (unset ${secretKeyEnv} to use it)`
        : "";
    throw new SecretKeyError(
      `the secret key from ${where} does not open the BYOK keys in ${dbPath} (a wrong key, or one from another database); use the key this database was sealed with${fileHint}`,
    );
  }
  return box;
}

/**
 * A rotation writes the new key beside the old one, commits the rows sealed with it, then renames
 * it over the old one. After a crash in between, the database says which of the two is current.
 */
function finishRotation(dbPath: string, current: SecretBox, check: string | undefined): SecretBox {
  const pending = pendingKeyFileOf(dbPath);
  if (!existsSync(pending)) return current;
  const next = SecretBox.parse(readFileSync(pending, "utf8"), pending);
  if (check !== undefined && !current.opensCheck(check) && next.opensCheck(check)) {
    renameSync(pending, keyFileOf(dbPath));
    return next;
  }
  rmSync(pending, { force: true });
  return current;
}

interface ByokSecretRow {
  id: string;
  secret: string;
  sealed: number;
}

/** Seals `rows` with `box`, opening the sealed ones with `from`; throws if one does not open. */
function resealRows(db: DB, rows: ByokSecretRow[], from: SecretBox, box: SecretBox): void {
  const update = db.prepare("UPDATE byok_credentials SET secret = ?, sealed = 1 WHERE id = ?");
  for (const row of rows) {
    const plaintext = row.sealed ? from.open(row.secret, byokContext(row.id)) : row.secret;
    if (plaintext === undefined) {
      throw new SecretKeyError(`BYOK credential ${row.id} does not open with the current key`);
    }
    update.run(box.seal(plaintext, byokContext(row.id)), row.id);
  }
}

/** Seals BYOK rows still in plain text (written before sealing existed). Returns how many. */
export function sealPlaintextByok(db: DB, box: SecretBox): number {
  const rows = db
    .prepare("SELECT id, secret, sealed FROM byok_credentials WHERE sealed = 0")
    .all() as ByokSecretRow[];
  if (rows.length === 0) return 0;
  scrubFreedPages(db, () => db.transaction(() => resealRows(db, rows, box, box))());
  return rows.length;
}

interface ProviderUrlRow extends BaseUrlColumns {
  id: string;
}

const providerUrlColumns = "id, base_url, base_url_sealed, base_url_shown";

/**
 * Stores the base URLs of `rows` as `box` seals them, opening sealed ones with `from`; throws if
 * one does not open. Returns how many it sealed.
 */
function resealBaseUrls(db: DB, rows: ProviderUrlRow[], from: SecretBox, box: SecretBox): number {
  const update = db.prepare(
    `UPDATE providers SET base_url = @base_url, base_url_sealed = @base_url_sealed,
       base_url_shown = @base_url_shown WHERE id = @id`,
  );
  let sealed = 0;
  for (const row of rows) {
    const url = openedBaseUrl(row, from);
    if (url === undefined) {
      throw new SecretKeyError(
        `the base_url of provider ${row.id} does not open with the current key`,
      );
    }
    const columns = sealedBaseUrl(row.id, url, box);
    update.run({ id: row.id, ...columns });
    if (columns.base_url_sealed !== null) sealed++;
  }
  return sealed;
}

/**
 * Seals provider base URLs still in plain text: written before they were sealed, or by an older
 * gateway since. Returns how many rows it rewrote.
 */
export function sealPlainBaseUrls(db: DB, box: SecretBox): number {
  const rows = (
    db
      .prepare(`SELECT ${providerUrlColumns} FROM providers WHERE base_url IS NOT NULL`)
      .all() as ProviderUrlRow[]
  ).filter(holdsPlainBaseUrl);
  if (rows.length === 0) return 0;
  scrubFreedPages(db, () => db.transaction(() => resealBaseUrls(db, rows, box, box))());
  return rows.length;
}

/**
 * Re-seals every BYOK credential and provider base URL with a new key, in one transaction with
 * the new key check.
 * With the key in the environment the new key comes from `newEnvKey` and the operator swaps the
 * variables afterwards; with a key file the new key is generated and replaces the file.
 */
export function rotateSecretKey(
  db: DB,
  dbPath: string,
  envKey: string | undefined,
  newEnvKey: string | undefined,
): { rotated: number; baseUrls: number; keyFile?: string } {
  const current = loadSecretBox(db, dbPath, envKey);
  const rows = db
    .prepare("SELECT id, secret, sealed FROM byok_credentials")
    .all() as ByokSecretRow[];
  const providers = (
    db.prepare(`SELECT ${providerUrlColumns} FROM providers`).all() as ProviderUrlRow[]
  ).filter((row) => row.base_url_sealed !== null || holdsPlainBaseUrl(row));
  let baseUrls = 0;
  // Old-key values left in freed space would open with a leaked old key: they are zeroed too.
  const commit = (next: SecretBox) =>
    scrubFreedPages(db, () =>
      db.transaction(() => {
        resealRows(db, rows, current, next);
        baseUrls = resealBaseUrls(db, providers, current, next);
        writeCheck(db, next);
      })(),
    );
  if (envKey) {
    if (!newEnvKey) {
      throw new SecretKeyError(
        `the key comes from ${secretKeyEnv}: put the new key in ${newSecretKeyEnv} (openssl rand -base64 32), rotate, then make it ${secretKeyEnv}`,
      );
    }
    commit(SecretBox.parse(newEnvKey, newSecretKeyEnv));
    return { rotated: rows.length, baseUrls };
  }
  const next = SecretBox.random();
  const pending = pendingKeyFileOf(dbPath);
  writePrivateFile(pending, `${next.encoded()}\n`);
  try {
    commit(next);
  } catch (err) {
    rmSync(pending, { force: true });
    throw err;
  }
  renameSync(pending, keyFileOf(dbPath));
  return { rotated: rows.length, baseUrls, keyFile: keyFileOf(dbPath) };
}
