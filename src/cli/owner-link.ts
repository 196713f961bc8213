import type { Command } from "commander";
import { localOwnerLink } from "./local-serve.js";
import { printJson, result } from "./output.js";

/**
 * `gateway owner-link`: a fresh one-time dashboard link for the `gateway serve` running on a
 * database file, for when the link it printed at start-up is lost or spent.
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
      const link = await localOwnerLink(flags.db);
      if (flags.json) printJson({ owner_url: link.url, account_id: link.accountId });
      else result(`owner dashboard (one-time link, opens a session): ${link.url}`);
    });
}
