import { existsSync } from "node:fs";
import { hostname } from "node:os";
import type { Command } from "commander";
import { cliCommand } from "../cli-command.js";
import { type DeviceCodeResponse, GatewayClient, resolveBaseUrl } from "./api-client.js";
import { openInBrowser } from "./browser.js";
import {
  type CredentialStores,
  defaultProfile,
  endingPromptly,
  fileFallbackNotice,
  findStoredLogin,
  openCredentialStores,
} from "./credentials/index.js";
import { UserError } from "./errors.js";
import { localOwnerLink } from "./local-serve.js";
import { note, paintFor, printJson, result, startSpinner } from "./output.js";

/**
 * `gateway login`: the device-authorization flow. Ask for a code, show the URL and code (always,
 * since a browser may not open), open the browser, poll at the server's pace until the owner
 * approves, denies or the code expires, then store the login key. The key is never printed.
 */

/** RFC 8628 3.5: on slow_down the client adds 5 seconds to its interval for good. */
const slowDownStepSeconds = 5;
/** Polls that fail to reach the server in a row before login gives up. */
const maxUnreachablePolls = 3;

/** Everything the flow touches, so a test can drive it without patching globals. */
export interface LoginContext {
  client: GatewayClient;
  stores: CredentialStores;
  openBrowser(url: string): Promise<void>;
  sleep(ms: number): Promise<void>;
  now(): number;
  clientName: string;
  /**
   * On the machine that runs the gateway: a one-time owner link that signs the browser in and
   * leads to `approvalUrl`, so approving is one click; undefined where none can be minted.
   */
  signedInUrl?(approvalUrl: string): Promise<string | undefined>;
}

export interface LoginOptions {
  profile: string;
  browser: boolean;
}

export interface LoginOutcome {
  keyId: string;
  accountId: string;
  prefix: string;
  storedIn: string;
}

export async function runLogin(ctx: LoginContext, opts: LoginOptions): Promise<LoginOutcome> {
  const err = paintFor(process.stderr);
  const device = await ctx.client.requestDeviceCode(ctx.clientName);
  // Ctrl-C while waiting: the code is cancelled on the gateway, so nobody can approve it later.
  const cancel = () => {
    process.stderr.write("\n");
    note("Login cancelled; the code can no longer be approved.");
    void ctx.client
      .cancelDeviceCode(device.device_code)
      .catch(() => undefined)
      .finally(() => process.exit(130));
  };
  process.once("SIGINT", cancel);
  let approved: Awaited<ReturnType<typeof pollForApproval>>;
  try {
    const approvalUrl = device.verification_uri_complete ?? device.verification_uri;
    const signedIn = await ctx.signedInUrl?.(approvalUrl).catch(() => undefined);
    const url = signedIn ?? approvalUrl;
    note(
      signedIn
        ? `Open this one-time URL to approve; it signs this machine's browser in to the gateway dashboard:\n\n  ${err.bold(url)}\n`
        : `Open this URL in a browser where you are signed in to the gateway dashboard:\n\n  ${err.bold(url)}\n`,
    );
    note(`and check that the page shows this code: ${err.bold(device.user_code)}\n`);
    if (opts.browser) {
      await ctx
        .openBrowser(url)
        .catch(() => note("Could not open a browser; open the URL above yourself."));
    }
    approved = await pollForApproval(ctx, device);
  } finally {
    process.off("SIGINT", cancel);
  }
  const previous = await findStoredLogin(ctx.stores, opts.profile);
  if (ctx.stores.keychainUnavailable) {
    note(`gateway: ${fileFallbackNotice(ctx.stores.keychainUnavailable, ctx.stores.primary)}`);
  }
  await ctx.stores.primary.set(opts.profile, {
    key: approved.key,
    baseUrl: ctx.client.baseUrl,
    keyId: approved.keyId,
    accountId: approved.accountId,
    savedAt: new Date(ctx.now()).toISOString(),
  });
  if (previous && previous.store !== ctx.stores.primary)
    await previous.store.delete(opts.profile).catch(() => false);
  await retirePreviousKey(ctx, previous?.login);
  return {
    keyId: approved.keyId,
    accountId: approved.accountId,
    prefix: approved.key.slice(0, 7),
    storedIn: ctx.stores.primary.location,
  };
}

async function pollForApproval(
  ctx: LoginContext,
  device: DeviceCodeResponse,
): Promise<{ key: string; keyId: string; accountId: string }> {
  let intervalSeconds = device.interval ?? 5;
  const deadline = ctx.now() + device.expires_in * 1000;
  const remaining = () => {
    const seconds = Math.max(0, Math.round((deadline - ctx.now()) / 1000));
    return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`;
  };
  const spinner = startSpinner(
    () => `Waiting for approval in the browser (code expires in ${remaining()})...`,
  );
  let unreachable = 0;
  try {
    for (;;) {
      await ctx.sleep(intervalSeconds * 1000);
      let poll: Awaited<ReturnType<GatewayClient["pollDeviceToken"]>>;
      try {
        poll = await ctx.client.pollDeviceToken(device.device_code);
        unreachable = 0;
      } catch (e) {
        // A gateway restarting for a moment should not end the login; a gone one should.
        if (++unreachable >= maxUnreachablePolls || ctx.now() >= deadline) throw e;
        continue;
      }
      if (poll.ok) return poll;
      switch (poll.error) {
        case "authorization_pending":
          if (ctx.now() >= deadline) throw expired();
          continue;
        case "slow_down":
          intervalSeconds = Math.max(intervalSeconds + slowDownStepSeconds, poll.interval ?? 0);
          spinner.update(`The gateway asked to poll slower: every ${intervalSeconds} s now.`, true);
          continue;
        case "access_denied":
          throw new UserError("login denied in the browser; no key was created");
        case "expired_token":
          throw expired();
        case "invalid_grant":
          throw new UserError(
            `the gateway no longer knows this login request; run \`${cliCommand("login")}\` again`,
          );
        default:
          throw new UserError(
            `the gateway ended the login with "${poll.error}"; run \`${cliCommand("login")}\` again`,
          );
      }
    }
  } finally {
    spinner.stop();
  }
}

function expired(): UserError {
  return new UserError(
    `the code expired before it was approved; run \`${cliCommand("login")}\` again`,
  );
}

/** A fresh login replaces the profile's previous login key; that one is revoked, best effort. */
async function retirePreviousKey(
  ctx: LoginContext,
  previous: { key: string; baseUrl: string } | undefined,
): Promise<void> {
  if (!previous || previous.baseUrl !== ctx.client.baseUrl) return;
  await new GatewayClient({ baseUrl: previous.baseUrl, key: previous.key })
    .logout()
    .catch(() => undefined);
}

interface LoginFlags {
  json?: boolean;
  baseUrl?: string;
  browser: boolean;
  profile: string;
  db?: string;
}

/**
 * The approval page, already signed in, when the gateway being logged in to runs on this machine
 * on `dbPath` (as `gateway dashboard` opens it). Where it does not, the usual page: a `--db` the
 * user named is worth a note saying why; the default file is only a guess.
 */
export function signedInApproval(
  dbPath: string,
  baseUrl: string,
  named: boolean,
): (approvalUrl: string) => Promise<string | undefined> {
  return async (approvalUrl) => {
    if (!named && !existsSync(dbPath)) return undefined;
    const page = new URL(approvalUrl);
    try {
      const link = await localOwnerLink(dbPath, {
        forBaseUrl: baseUrl,
        linkOrigin: page.origin,
        next: page.pathname + page.search,
      });
      return link.url;
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      if (named) note(`gateway: no signed-in approval page: ${e.message}`);
      return undefined;
    }
  };
}

export function registerLogin(program: Command): void {
  program
    .command("login")
    .description("Log in to a gateway in the browser and store a login key (never printed)")
    .option(
      "--base-url <url>",
      "gateway to log in to (default GATEWAY_BASE_URL or http://127.0.0.1:8787)",
    )
    .option("--no-browser", "do not open a browser; open the printed URL yourself")
    .option("--profile <name>", "store the key under this profile", defaultProfile)
    .option(
      "--db <file>",
      "the database of the gateway's serve on this machine, to open the approval page signed in (default ./gateway.db when present)",
    )
    .option("--json", "print {base_url, account_id, key_id, prefix, stored_in} as JSON when done")
    .addHelpText(
      "after",
      `
The owner approves the request on the gateway's dashboard page, after checking the code shown
there matches the one printed here. On the machine that runs \`gateway serve\` (its database
./gateway.db, or --db), the page opens already signed in: approving is one click.

The key goes to the OS keychain, or where none works to
~/.config/model-gateway/credentials.json (mode 0600). GATEWAY_CREDENTIAL_STORE=file|keychain
forces one; GATEWAY_API_KEY overrides any stored key.

Examples:
  $ gateway login
  $ gateway login --db /srv/gateway/gateway.db
  $ gateway login --no-browser --base-url http://127.0.0.1:8787
  $ gateway login --profile staging --base-url https://gateway.example.test`,
    )
    .action(
      endingPromptly(async (flags: LoginFlags) => {
        const client = new GatewayClient({ baseUrl: resolveBaseUrl(flags.baseUrl) });
        const stores = await openCredentialStores();
        const outcome = await runLogin(
          {
            client,
            stores,
            openBrowser: openInBrowser,
            sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
            now: Date.now,
            clientName: `gateway login on ${hostname()}`,
            signedInUrl: signedInApproval(
              flags.db ?? "gateway.db",
              client.baseUrl,
              flags.db !== undefined,
            ),
          },
          { profile: flags.profile, browser: flags.browser },
        );
        const out = paintFor(process.stdout);
        if (flags.json) {
          printJson({
            base_url: client.baseUrl,
            account_id: outcome.accountId,
            key_id: outcome.keyId,
            prefix: outcome.prefix,
            stored_in: outcome.storedIn,
          });
        } else
          result(
            `${out.green("Logged in")} to ${client.baseUrl} as account ${outcome.accountId} ` +
              `(login key ${outcome.keyId}, ${outcome.prefix}...), stored in ${outcome.storedIn}.`,
          );
        if (process.env.GATEWAY_API_KEY) {
          note(
            "Note: GATEWAY_API_KEY is set and takes precedence over the stored key until you unset it.",
          );
        }
      }),
    );
}
