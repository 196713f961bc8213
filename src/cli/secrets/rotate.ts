import { existsSync } from "node:fs";
import type { Command } from "commander";
import { openingDatabase, sqliteFileOnly, UsageError, UserError } from "../errors.js";
import { printJson, result } from "../output.js";

/**
 * `gateway secrets rotate`: re-seals every BYOK credential and sealed provider base URL of a
 * database with a new key, in one transaction. Offline, like `gateway owner-link`: whoever can open the database file and its key
 * is its operator. A running server holds the old key in memory, so it must be stopped first.
 */

interface RotateFlags {
  db: string;
  json?: boolean;
}

export function registerSecretsRotate(secrets: Command): void {
  secrets
    .command("rotate")
    .description("Re-encrypt every BYOK key of a database with a new secret key")
    .option("--db <file>", "the SQLite database", "gateway.db")
    .option("--json", "print JSON, for scripts")
    .addHelpText(
      "after",
      `
The key is GATEWAY_SECRET_KEY when set, else the file <db>.key beside the database.
With a key file a new key is generated and replaces the file. With GATEWAY_SECRET_KEY, put the
new key in GATEWAY_NEW_SECRET_KEY, rotate, then start the gateway with it as GATEWAY_SECRET_KEY.

Examples:
  $ gateway secrets rotate --db /srv/gateway/gateway.db
  $ GATEWAY_SECRET_KEY=$OLD GATEWAY_NEW_SECRET_KEY=$(openssl rand -base64 32) gateway secrets rotate`,
    )
    .action(async (flags: RotateFlags) => {
      sqliteFileOnly(
        flags.db,
        "on Postgres every gateway reads GATEWAY_SECRET_KEY, and rotating it is not supported yet",
      );
      if (flags.db === ":memory:") {
        throw new UsageError("an in-memory database has no key to rotate");
      }
      if (!existsSync(flags.db)) throw new UserError(`no database at ${flags.db}; pass --db`);
      // Loaded here: the other client commands should not pay for SQLite.
      const { openDatabase } = await import("../../store/sqlite/db.js");
      const { readLiveServeRecord } = await import("../../store/serve-record.js");
      const { SqliteServeRecord } = await import("../../store/sqlite/serve-record.js");
      const { SecretKeyError, secretKeyEnv, newSecretKeyEnv } = await import(
        "../../store/secret-box.js"
      );
      const { keyFileOf, rotateSecretKey } = await import("../../store/sqlite/byok-sealing.js");
      if (!process.env[secretKeyEnv] && !existsSync(keyFileOf(flags.db))) {
        const { keychainSealingKey } = await import("../../store/sqlite/sealing-key.js");
        if (await keychainSealingKey(flags.db).catch(() => undefined)) {
          throw new UserError(
            `the sealing key of ${flags.db} is in the OS keychain, and rotating a key kept there is not supported yet`,
          );
        }
      }
      const db = openingDatabase(flags.db, () => openDatabase(flags.db));
      try {
        const server = await readLiveServeRecord(new SqliteServeRecord(db));
        if (server) {
          throw new UserError(
            `\`gateway serve\` (pid ${server.pid}) runs on ${flags.db}; stop it, rotate, start it again`,
          );
        }
        const done = rotateSecretKey(
          db,
          flags.db,
          process.env[secretKeyEnv],
          process.env[newSecretKeyEnv],
        );
        const where = done.keyFile ?? `${newSecretKeyEnv} (now set it as ${secretKeyEnv})`;
        if (flags.json) {
          printJson({
            rotated: done.rotated,
            base_urls: done.baseUrls,
            key: done.keyFile ?? newSecretKeyEnv,
          });
        } else {
          const urls = done.baseUrls > 0 ? ` and ${done.baseUrls} provider base URLs` : "";
          result(`re-encrypted ${done.rotated} BYOK keys${urls}; the new key is in ${where}`);
        }
      } catch (err) {
        if (err instanceof SecretKeyError) throw new UserError(err.message);
        throw err;
      } finally {
        db.close();
      }
    });
}
