import type { Command } from "commander";
import { shownText } from "../server/http/shown-text.js";
import { shownKeyKind } from "../store/key-rows.js";
import { connectWithKey } from "./api-client.js";
import { defaultProfile, endingPromptly, profileFlag } from "./credentials/index.js";
import { printJson, result } from "./output.js";

/** `gateway whoami` (alias `status`): which account and key this machine is using, and from where. */

interface WhoamiFlags {
  baseUrl?: string;
  profile: string;
  json?: boolean;
}

export function registerWhoami(program: Command): void {
  program
    .command("whoami")
    .alias("status")
    .description("Show the account and key in use, and where the key is stored")
    .option("--base-url <url>", "gateway to ask (default: the one logged in to)")
    .option("--profile <name>", "profile to show", profileFlag, defaultProfile)
    .option("--json", "print JSON, for scripts")
    .addHelpText(
      "after",
      `
Examples:
  $ gateway whoami
  $ gateway status --json`,
    )
    .action(
      endingPromptly(async (flags: WhoamiFlags) => {
        const { client, credential } = await connectWithKey(flags);
        const me = await client.whoami();
        if (flags.json) {
          printJson({ ...me, base_url: client.baseUrl, stored_in: credential.source });
          return;
        }
        // A per-tool key's label is for any holder of its login key to choose, and every field is
        // as the server sent it: each is shown as one line that cannot drive the terminal.
        const label = me.label ? `, "${shownText(me.label)}"` : "";
        result(
          [
            `account:   ${shownText(me.account_id)}`,
            `key:       ${shownText(me.key_id)} (${shownText(me.prefix)}..., ${shownText(shownKeyKind(me))}${label})`,
            `gateway:   ${client.baseUrl}`,
            `stored in: ${credential.source}`,
          ].join("\n"),
        );
      }),
    );
}
