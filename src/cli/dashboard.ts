import type { Command } from "commander";
import { openInBrowser } from "./browser.js";
import { type LocalOwnerLink, localOwnerLink } from "./local-serve.js";
import { note, printJson, result } from "./output.js";

/**
 * `gateway dashboard`: the owner's dashboard, signed in, in the browser (wrangler's `[b]`). On
 * the machine that runs `gateway serve`, it mints a fresh one-time owner link from the serve's
 * database file, opens it and prints it, since a browser may not open.
 */

/** What the command touches, so a test drives it without a browser. */
export interface DashboardContext {
  mint(dbPath: string): Promise<LocalOwnerLink>;
  openBrowser(url: string): Promise<void>;
}

export interface DashboardOptions {
  db: string;
  browser: boolean;
}

export async function runDashboard(
  ctx: DashboardContext,
  opts: DashboardOptions,
): Promise<LocalOwnerLink & { opened: boolean }> {
  const link = await ctx.mint(opts.db);
  if (!opts.browser) return { ...link, opened: false };
  const opened = await ctx.openBrowser(link.url).then(
    () => true,
    () => false,
  );
  return { ...link, opened };
}

interface DashboardFlags {
  db: string;
  browser: boolean;
  json?: boolean;
}

export function registerDashboard(program: Command): void {
  program
    .command("dashboard")
    .description("Open the owner dashboard of the running `gateway serve`, signed in")
    .option("--db <file>", "the SQLite database the server runs on", "gateway.db")
    .option("--no-browser", "only print the one-time link")
    .option("--json", "print {owner_url, account_id, opened} as JSON, for scripts")
    .addHelpText(
      "after",
      `
Each run mints a fresh one-time owner link (the one \`gateway serve\` printed may be spent) and
opens it; the link signs the browser in to the dashboard. Run it on the machine where
\`gateway serve\` runs: the database file is what proves you are the owner.

Examples:
  $ gateway dashboard
  $ gateway dashboard --db /srv/gateway/gateway.db --no-browser`,
    )
    .action(async (flags: DashboardFlags) => {
      const outcome = await runDashboard(
        { mint: (db) => localOwnerLink(db), openBrowser: openInBrowser },
        { db: flags.db, browser: flags.browser },
      );
      if (flags.json) {
        printJson({
          owner_url: outcome.url,
          account_id: outcome.accountId,
          opened: outcome.opened,
        });
        return;
      }
      result(`owner dashboard (one-time link, opens a session): ${outcome.url}`);
      if (flags.browser && !outcome.opened)
        note("Could not open a browser; open the link above yourself.");
    });
}
