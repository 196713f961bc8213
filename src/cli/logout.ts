import type { Command } from "commander";
import { cliCommand } from "../cli-command.js";
import { shownText } from "../server/http/shown-text.js";
import {
  GatewayClient,
  GatewayRefusal,
  retireReplacedLogins,
  storedKeyGateway,
} from "./api-client.js";
import {
  defaultProfile,
  endingPromptly,
  lookUpLogin,
  openCredentialStores,
  profileFlag,
  withProfile,
} from "./credentials/index.js";
import { UserError } from "./errors.js";
import { note, printJson, result } from "./output.js";

/**
 * `gateway logout`: revoke the profile's login key on the gateway, then forget it locally.
 * If the gateway cannot be reached the key is kept, so the revocation can be retried: removing
 * only the local copy would leave a live key behind.
 */

interface LogoutFlags {
  json?: boolean;
  baseUrl?: string;
  profile: string;
}

export function registerLogout(program: Command): void {
  program
    .command("logout")
    .description("Revoke the stored login key on the gateway and remove it from this machine")
    .option("--base-url <url>", "gateway the key belongs to (default: the one logged in to)")
    .option("--profile <name>", "profile to log out", profileFlag, defaultProfile)
    .option("--json", "print {key_id, revoked_on_server, base_url, removed_from} as JSON")
    .addHelpText(
      "after",
      `
Per-tool keys made with \`gateway keys create\` keep working; revoke them with \`gateway keys revoke\` first.

Examples:
  $ gateway logout
  $ gateway logout --profile staging`,
    )
    .action(
      endingPromptly(async (flags: LogoutFlags) => {
        const { found, replaced, keychainUnreadable } = await lookUpLogin(
          await openCredentialStores(),
          flags.profile,
        );
        if (!found) {
          const envNote = process.env.GATEWAY_API_KEY
            ? " (GATEWAY_API_KEY is set, but logout never touches it)"
            : "";
          throw new UserError(
            keychainUnreadable === undefined
              ? `not logged in with profile "${flags.profile}"; nothing to log out${envNote}`
              : `no login found for profile "${flags.profile}", but the OS keychain, which may hold it, could not be read (${keychainUnreadable}); unlock the keychain and run this again${envNote}`,
          );
        }
        const baseUrl = storedKeyGateway(flags.baseUrl, found.login.baseUrl);
        const client = new GatewayClient({ baseUrl, key: found.login.key });
        let revokedOnServer = true;
        try {
          await client.logout();
        } catch (err) {
          if (!(err instanceof GatewayRefusal) || err.status !== 401) {
            throw new UserError(
              `${err instanceof Error ? err.message : String(err)}; the key was NOT revoked and is still stored, run \`${cliCommand(withProfile("logout", flags.profile))}\` again`,
            );
          }
          // 401: the gateway already does not accept this key (revoked, or a reset database).
          revokedOnServer = false;
        }
        await found.store.delete(flags.profile);
        // Older logins of the profile still stored elsewhere go too: nothing of it stays behind.
        await retireReplacedLogins(client, flags.profile, found.login, replaced);
        if (flags.json) {
          printJson({
            key_id: found.login.keyId,
            revoked_on_server: revokedOnServer,
            base_url: baseUrl,
            removed_from: found.store.location,
          });
        } else {
          // Stored by a login that took the id as the server sent it (an older CLI's).
          const keyId = shownText(found.login.keyId);
          result(
            revokedOnServer
              ? `Logged out: login key ${keyId} revoked on ${baseUrl} and removed from ${found.store.location}.`
              : `Logged out: the gateway no longer accepted login key ${keyId}; removed it from ${found.store.location}.`,
          );
        }
        if (process.env.GATEWAY_API_KEY)
          note("Note: GATEWAY_API_KEY is still set in this environment.");
      }),
    );
}
