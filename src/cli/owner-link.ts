import { existsSync } from "node:fs";
import type { Command } from "commander";
import { openingDatabase, sqliteFileOnly, UserError } from "./errors.js";
import { printJson, result } from "./output.js";

/**
 * `gateway owner-link`: a fresh one-time dashboard link for the `gateway serve` running on a
 * database file, for when the link it printed at start-up is lost or spent. Whoever can open the
 * database file is the owner already, so the file is the authority, not a key.
 */

interface OwnerLinkFlags {
  db: string;
  json?: boolean;
}

export function registerOwnerLink(program: Command): void {
  program
    .command("owner-link")
    .description("Print a new one-time owner dashboard link for the running `gateway serve`")
    .option("--db <file>", "the SQLite database the server runs on", "gateway.db")
    .option("--json", "print JSON, for scripts")
    .addHelpText(
      "after",
      `
Examples:
  $ gateway owner-link
  $ gateway owner-link --db /srv/gateway/gateway.db --json`,
    )
    .action(async (flags: OwnerLinkFlags) => {
      sqliteFileOnly(
        flags.db,
        "on Postgres each gateway prints its own owner link when it starts (serve --json: owner_url)",
      );
      if (flags.db === ":memory:") {
        throw new UserError(
          "an in-memory database belongs to its server alone; use its start-up link",
        );
      }
      if (!existsSync(flags.db)) {
        throw new UserError(
          `no database at ${flags.db}; run this where \`gateway serve\` runs, or pass --db`,
        );
      }
      // Loaded here: the other client commands should not pay for SQLite.
      const { openDatabase } = await import("../store/db.js");
      const { SqliteServeRecord } = await import("../store/serve-record.js");
      const { SqliteSessions } = await import("../store/sessions.js");
      const { liveServeRuntime } = await import("../server/dashboard/serve-runtime.js");
      const { createOwnerLink } = await import("../server/auth/owner-session.js");
      const db = openingDatabase(flags.db, () => openDatabase(flags.db));
      try {
        const server = await liveServeRuntime(new SqliteServeRecord(db));
        if (!server) {
          throw new UserError(
            `no running \`gateway serve\` uses ${flags.db}; start one (it prints an owner link as it starts)`,
          );
        }
        if (!server.ownerAccountId) {
          throw new UserError(
            "the running gateway has no account whose dashboard a link could open",
          );
        }
        const url = await createOwnerLink(
          new SqliteSessions(db),
          server.ownerAccountId,
          server.url,
        );
        if (flags.json) printJson({ owner_url: url, account_id: server.ownerAccountId });
        else result(`owner dashboard (one-time link, opens a session): ${url}`);
      } finally {
        db.close();
      }
    });
}
