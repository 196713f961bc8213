import { existsSync } from "node:fs";
import { cliCommand } from "../../cli-command.js";
import { keyLabel, keyLabelMaxChars } from "../../store/key-rows.js";
import { openingDatabase, UsageError, UserError } from "../errors.js";

/**
 * `gateway keys create --db FILE`: a key minted straight into a gateway's database file, with or
 * without a `gateway serve` running on it (a running one finds the key on its first use: its key
 * cache reads the file on a miss). Like `gateway owner-link`, whoever can open the file owns the
 * gateway, so the file is the authority, not a login key.
 */

export interface OfflineKey {
  id: string;
  key: string;
  label: string;
  kind: string;
  /** Always null: a key made from the database file is no login's per-tool key. */
  parent_key_id: null;
  account_id: string;
  created_at: number;
}

/**
 * `--label` as every gateway takes it (trimmed, characters counted as the gateway counts them),
 * refused here in the CLI's words, before a login key or a database is touched: a flag value out
 * of range, so the command line's mistake (exit code 2).
 */
export function labelFlag(label: string): string {
  const parsed = keyLabel.safeParse(label);
  if (!parsed.success) {
    throw new UsageError(
      `--label must be 1 to ${keyLabelMaxChars} characters (what the key is for), e.g. --label ci`,
    );
  }
  return parsed.data;
}

export async function createKeyInDatabase(input: {
  db: string;
  label: string;
  account?: string;
  shared: boolean;
}): Promise<OfflineKey> {
  const label = labelFlag(input.label);
  if (input.db === ":memory:") {
    throw new UsageError("an in-memory database belongs to its server alone; give a file to --db");
  }
  if (!existsSync(input.db)) {
    throw new UserError(
      `no database at ${input.db}; start \`${cliCommand(`serve --db ${input.db}`)}\` once to create it`,
    );
  }
  // Loaded here: the other client commands should not pay for SQLite.
  const { Store } = await import("../../store/sqlite/store.js");
  const { keychainSealingKey } = await import("../../store/sqlite/sealing-key.js");
  const { readLiveServeRecord } = await import("../../store/serve-record.js");
  const { SecretKeyError } = await import("../../store/secret-box.js");
  let store: InstanceType<typeof Store>;
  try {
    const sealing = await keychainSealingKey(input.db);
    store = openingDatabase(input.db, () =>
      sealing
        ? new Store(input.db, { secretKey: sealing.key, secretKeySource: sealing.source })
        : new Store(input.db),
    );
  } catch (err) {
    // The sealing key the environment or the keychain gives is the user's to fix, as `serve` says.
    if (err instanceof SecretKeyError) throw new UserError(err.message);
    throw err;
  }
  try {
    const accountId =
      input.account ??
      (await readLiveServeRecord(store.repos.serveRecord))?.ownerAccountId ??
      store.listAccounts()[0]?.id;
    if (!accountId) {
      throw new UserError(
        `${input.db} has no account yet; start \`${cliCommand(`serve --db ${input.db}`)}\` once (it creates the demo account) or apply a config`,
      );
    }
    if (!store.getAccount(accountId)) {
      const known = store
        .listAccounts()
        .map((a) => a.id)
        .join(", ");
      throw new UserError(`no account "${accountId}" in ${input.db}; its accounts: ${known}`);
    }
    const { key, value } = await store.createKey({
      accountId,
      label,
      kind: input.shared ? "shared" : "standard",
    });
    return {
      id: key.id,
      key: value,
      label: key.label,
      kind: key.kind,
      parent_key_id: null,
      account_id: accountId,
      created_at: key.created_at,
    };
  } finally {
    store.close();
  }
}
