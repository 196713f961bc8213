import type { Command } from "commander";
import { cliCommand } from "../../cli-command.js";
import { shownKeyKind } from "../../store/key-rows.js";
import { connectWithKey } from "../api-client.js";
import { defaultProfile, endingPromptly, profileFlag } from "../credentials/index.js";
import { formatTime, printJson, result, table } from "../output.js";

/**
 * `gateway keys list`: the account's per-tool keys, whichever login key created them (an earlier
 * login's too). Never shows a key's value.
 */

interface ListFlags {
  json?: boolean;
  baseUrl?: string;
  profile: string;
}

export function registerKeysList(keys: Command): void {
  keys
    .command("list")
    .alias("ls")
    .description("List the account's per-tool keys, from any login (never their values)")
    .option("--json", "print {data: [...]} as JSON")
    .option("--base-url <url>", "gateway to use (default: the one logged in to)")
    .option("--profile <name>", "login profile to use", profileFlag, defaultProfile)
    .addHelpText(
      "after",
      `
Examples:
  $ gateway keys list
  $ gateway keys list --json | jq '.data[] | select(.revoked_at == null) | .id'`,
    )
    .action(
      endingPromptly(async (flags: ListFlags) => {
        const { client } = await connectWithKey(flags);
        const keys = await client.listKeys();
        if (flags.json) {
          printJson({ data: keys });
          return;
        }
        if (keys.length === 0) {
          result(`No keys yet. Create one with: ${cliCommand("keys create --label NAME")}`);
          return;
        }
        const rows = keys.map((k) => [
          k.id,
          k.label,
          shownKeyKind(k),
          `${k.prefix}...`,
          formatTime(k.created_at),
          formatTime(k.last_used_at),
          k.revoked_at === null ? "active" : `revoked ${formatTime(k.revoked_at)}`,
        ]);
        result(
          table(
            ["ID", "LABEL", "KIND", "PREFIX", "CREATED (UTC)", "LAST USED (UTC)", "STATUS"],
            rows,
          ),
        );
      }),
    );
}
