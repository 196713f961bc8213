import type { Command } from "commander";
import { cliCommand } from "../../cli-command.js";
import { shownText } from "../../server/http/shown-text.js";
import { connectWithKey } from "../api-client.js";
import { defaultProfile, endingPromptly, profileFlag, withProfile } from "../credentials/index.js";
import { UsageError, UserError } from "../errors.js";
import { formatTime, printJson, result } from "../output.js";

/** `gateway keys revoke ID|LABEL`: the key stops working on its very next request. */

interface RevokeFlags {
  json?: boolean;
  baseUrl?: string;
  profile: string;
}

export function registerKeysRevoke(keys: Command): void {
  keys
    .command("revoke")
    .description("Revoke a per-tool key by id or label; it stops working at once")
    .argument("<id-or-label>", "the key's id (key_...) or its label")
    .option("--json", "print {id, revoked, already_revoked, revoked_at} as JSON")
    .option("--base-url <url>", "gateway to use (default: the one logged in to)")
    .option("--profile <name>", "login profile to use", profileFlag, defaultProfile)
    .addHelpText(
      "after",
      `
Examples:
  $ gateway keys revoke key_3fJx9q0aB1cD2eF3
  $ gateway keys revoke ci`,
    )
    .action(
      endingPromptly(async (idOrLabel: string, flags: RevokeFlags) => {
        if (idOrLabel === "")
          throw new UsageError(
            `give the key's id or label, e.g. \`${cliCommand("keys revoke ci")}\` (\`${cliCommand("keys list")}\` shows them)`,
          );
        // Not a path segment a URL can carry ("." and ".." are the URL's own), so not one the
        // gateway can be asked for by label.
        if (idOrLabel === "." || idOrLabel === "..")
          throw new UserError(
            `a key labelled "${idOrLabel}" can be revoked only by its id (\`${cliCommand("keys list")}\` shows it)`,
          );
        const { client, credential } = await connectWithKey(flags);
        // The login key is no per-tool key, so the gateway would answer "no such key" (404).
        if (idOrLabel === credential.stored?.login.keyId) {
          throw new UserError(
            `${idOrLabel} is the login key this CLI uses, not a per-tool key; \`${cliCommand(withProfile("logout", flags.profile))}\` revokes it and removes it from this machine`,
          );
        }
        const revoked = await client.revokeKey(idOrLabel);
        // The id is as the server sent it: shown as one line that cannot drive the terminal.
        const id = shownText(revoked.id);
        if (flags.json) printJson(revoked);
        else if (revoked.already_revoked)
          result(
            `Key ${id} was already revoked (${formatTime(revoked.revoked_at ?? null)} UTC); nothing changed.`,
          );
        else result(`Revoked key ${id}; requests with it now get 401.`);
      }),
    );
}
