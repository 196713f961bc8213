import { existsSync } from "node:fs";
import { hostname } from "node:os";
import type { Command } from "commander";
import { cliCommand } from "../cli-command.js";
import { reasonOf } from "../store/os-keychain.js";
import {
  type DeviceCodeResponse,
  GatewayClient,
  oneLine,
  resolveBaseUrl,
  revokeReplacedLogin,
} from "./api-client.js";
import { openInBrowser } from "./browser.js";
import {
  type CredentialStores,
  defaultProfile,
  endingPromptly,
  type FoundLogin,
  fileFallbackNotice,
  lookUpLogin,
  openCredentialStores,
  profileFlag,
} from "./credentials/index.js";
import { UserError } from "./errors.js";
import { localOwnerLink } from "./local-serve.js";
import { note, paintFor, printJson, result, startSpinner, type TextOutput } from "./output.js";

/**
 * `gateway login`: the device-authorization flow. Ask for a code, show the URL and code (always,
 * since a browser may not open), open the browser, poll at the server's pace until the owner
 * approves, denies or the code expires, then store the login key. The key is never printed.
 */

/** RFC 8628 3.5: on slow_down the client adds 5 seconds to its interval for good. */
const slowDownStepSeconds = 5;
/** Polls that fail to reach the server in a row before login gives up. */
const maxUnreachablePolls = 3;
/** The longest wait a Node timer keeps. */
const longestTimerMs = 2 ** 31 - 1;

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
  /** The result goes to stdout; the prompt, progress and notes to stderr. */
  stdout: TextOutput;
  stderr: TextOutput;
  /** Read for GATEWAY_API_KEY (it overrides the stored key) and the colour settings. */
  env: NodeJS.ProcessEnv;
  /** Calls `handler` on Ctrl-C until the returned function is called. */
  onInterrupt(handler: () => void): () => void;
}

export interface LoginOptions {
  profile: string;
  browser: boolean;
  /** The result as JSON for scripts, instead of a sentence. */
  json?: boolean;
}

export interface LoginOutcome {
  keyId: string;
  accountId: string;
  prefix: string;
  storedIn: string;
}

/** Exit code of a login ended by Ctrl-C (128 + SIGINT), as shells report it. */
const interruptedExitCode = 130;

export async function runLogin(ctx: LoginContext, opts: LoginOptions): Promise<LoginOutcome> {
  const { found: previous, replaced } = await lookUpLogin(ctx.stores, opts.profile);
  // One login per profile: said before the browser, so a user who meant to keep both can stop.
  if (previous && previous.login.baseUrl !== ctx.client.baseUrl) {
    note(
      `Note: profile "${opts.profile}" is logged in to ${previous.login.baseUrl}; this login replaces it and revokes that login key there. To keep both, stop now (Ctrl-C) and add --profile NAME.`,
      ctx.stderr,
    );
  }
  const device = await ctx.client.requestDeviceCode(ctx.clientName);
  // Ctrl-C while waiting: the code is cancelled on the gateway, so nobody can approve it later.
  const stop = new AbortController();
  let cancel = () => {};
  const cancelled = new Promise<never>((_, reject) => {
    cancel = () => {
      stop.abort();
      ctx.stderr.write("\n");
      void ctx.client
        .cancelDeviceCode(device.device_code)
        .catch(() => undefined)
        .finally(() =>
          reject(
            new UserError(
              "login cancelled; the code can no longer be approved",
              interruptedExitCode,
            ),
          ),
        );
    };
  });
  const stopListening = ctx.onInterrupt(() => cancel());
  let approved: Approval;
  try {
    approved = await Promise.race([promptAndWait(ctx, device, opts, stop.signal), cancelled]);
  } catch (e) {
    // Stopped by Ctrl-C: the login ends with the cancellation, once the gateway has it.
    if (stop.signal.aborted) await cancelled;
    throw e;
  } finally {
    stopListening();
  }
  const outcome = await keepLoginKey(
    ctx,
    opts.profile,
    approved,
    previous ? [previous, ...replaced] : [],
  );
  const out = paintFor(ctx.stdout, ctx.env);
  if (opts.json) {
    printJson(
      {
        base_url: ctx.client.baseUrl,
        account_id: outcome.accountId,
        key_id: outcome.keyId,
        prefix: outcome.prefix,
        stored_in: outcome.storedIn,
      },
      ctx.stdout,
    );
  } else
    result(
      `${out.green("Logged in")} to ${ctx.client.baseUrl} as account ${outcome.accountId} ` +
        `(login key ${outcome.keyId}, ${outcome.prefix}...), stored in ${outcome.storedIn}.`,
      ctx.stdout,
    );
  if (ctx.env.GATEWAY_API_KEY) {
    note(
      "Note: GATEWAY_API_KEY is set and takes precedence over the stored key until you unset it.",
      ctx.stderr,
    );
  }
  return outcome;
}

type Approval = { key: string; keyId: string; accountId: string };

/** Shows the URL and code, opens the browser, and waits for the owner's decision. */
async function promptAndWait(
  ctx: LoginContext,
  device: DeviceCodeResponse,
  opts: LoginOptions,
  stopped: AbortSignal,
): Promise<Approval> {
  const err = paintFor(ctx.stderr, ctx.env);
  const say = (line: string) => note(line, ctx.stderr);
  const approvalUrl = device.verification_uri_complete ?? device.verification_uri;
  const signedIn = await ctx.signedInUrl?.(approvalUrl).catch(() => undefined);
  const url = signedIn ?? approvalUrl;
  say(
    signedIn
      ? `Open this one-time URL to approve; it signs this machine's browser in to the gateway dashboard:\n\n  ${err.bold(url)}\n`
      : `Open this URL in a browser where you are signed in to the gateway dashboard:\n\n  ${err.bold(url)}\n`,
  );
  say(`and check that the page shows this code: ${err.bold(device.user_code)}\n`);
  if (opts.browser) {
    await ctx
      .openBrowser(url)
      .catch(() => say("Could not open a browser; open the URL above yourself."));
  }
  return pollForApproval(ctx, device, stopped);
}

async function pollForApproval(
  ctx: LoginContext,
  device: DeviceCodeResponse,
  stopped: AbortSignal,
): Promise<Approval> {
  let intervalSeconds = device.interval ?? 5;
  const deadline = ctx.now() + device.expires_in * 1000;
  const remaining = () => {
    const seconds = Math.max(0, Math.round((deadline - ctx.now()) / 1000));
    return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`;
  };
  if (stopped.aborted) throw stopped.reason;
  const spinner = startSpinner(
    () => `Waiting for approval in the browser (code expires in ${remaining()})...`,
    ctx.stderr,
    ctx.env,
  );
  stopped.addEventListener("abort", () => spinner.stop(), { once: true });
  let unreachable = 0;
  try {
    for (;;) {
      const left = deadline - ctx.now();
      if (left <= 0) throw expired();
      // An interval the server asked for past the code's life (slow_down, or the code's own)
      // would outwait it: the last poll comes at the deadline, and the login ends there.
      await ctx.sleep(Math.min(intervalSeconds * 1000, left));
      if (stopped.aborted) throw stopped.reason;
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
        default: {
          // An error RFC 8628 does not name comes from whatever answered: one line, as any other
          // server's refusal is shown.
          const said = poll.description ? `: ${oneLine(poll.description, 300)}` : "";
          throw new UserError(
            `the gateway ended the login with "${oneLine(poll.error, 100)}"${said}; run \`${cliCommand("login")}\` again`,
          );
        }
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

/**
 * Stores the new login key under the profile, in place of the profile's previous logins (whose
 * keys are revoked, best effort). A keychain that passed its probe but fails the write (locked, or
 * waiting on a prompt past its timeout) hands the key to the file, and says so.
 */
async function keepLoginKey(
  ctx: LoginContext,
  profile: string,
  approved: Approval,
  previous: FoundLogin[],
): Promise<LoginOutcome> {
  const { stores } = ctx;
  if (stores.keychainUnavailable) {
    note(`gateway: ${fileFallbackNotice(stores.keychainUnavailable, stores.primary)}`, ctx.stderr);
  }
  const login = {
    key: approved.key,
    baseUrl: ctx.client.baseUrl,
    keyId: approved.keyId,
    accountId: approved.accountId,
    savedAt: new Date(ctx.now()).toISOString(),
  };
  let storedIn = stores.primary;
  try {
    await storedIn.set(profile, login);
  } catch (e) {
    if (!stores.fallback) {
      // A key nobody holds is only a risk: revoke it before saying it could not be kept.
      await ctx.client
        .withKey(approved.key)
        .logout()
        .catch(() => undefined);
      throw new UserError(
        `could not store the login key in ${storedIn.location} (${reasonOf(e)}); it was revoked, run \`${cliCommand("login")}\` again`,
      );
    }
    note(`gateway: ${fileFallbackNotice(reasonOf(e), stores.fallback)}`, ctx.stderr);
    storedIn = stores.fallback;
    await storedIn.set(profile, login);
  }
  for (const old of previous) {
    if (old.store !== storedIn) await old.store.delete(profile).catch(() => false);
    await retirePreviousKey(ctx, profile, old);
  }
  return {
    keyId: approved.keyId,
    accountId: approved.accountId,
    prefix: approved.key.slice(0, 7),
    storedIn: storedIn.location,
  };
}

/**
 * A fresh login replaces the profile's previous login key: that one is revoked on the gateway it
 * belongs to (nobody holds it any more), best effort. One left alive on another gateway is said.
 */
async function retirePreviousKey(
  ctx: LoginContext,
  profile: string,
  previous: FoundLogin,
): Promise<void> {
  const problem = await revokeReplacedLogin(ctx.client, profile, previous.login);
  if (problem && previous.login.baseUrl !== ctx.client.baseUrl)
    note(`gateway: ${problem}`, ctx.stderr);
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
  stderr: TextOutput = process.stderr,
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
      if (named) note(`gateway: no signed-in approval page: ${e.message}`, stderr);
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
    .option("--profile <name>", "store the key under this profile", profileFlag, defaultProfile)
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
        await runLogin(await processLoginContext(flags), {
          profile: flags.profile,
          browser: flags.browser,
          json: flags.json,
        });
      }),
    );
}

/** The login flow's context from this process: its env, terminal, clock, keychain and browser. */
async function processLoginContext(flags: LoginFlags): Promise<LoginContext> {
  const client = new GatewayClient({ baseUrl: resolveBaseUrl(flags.baseUrl) });
  return {
    client,
    stores: await openCredentialStores(),
    openBrowser: openInBrowser,
    // Node fires a longer timer at once: the poll loop waits again for what is left.
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.min(ms, longestTimerMs))),
    now: Date.now,
    clientName: `gateway login on ${hostname()}`,
    signedInUrl: signedInApproval(flags.db ?? "gateway.db", client.baseUrl, flags.db !== undefined),
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    onInterrupt: (handler) => {
      process.once("SIGINT", handler);
      return () => process.off("SIGINT", handler);
    },
  };
}
