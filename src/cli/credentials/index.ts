import { cliCommand } from "../../cli-command.js";
import { reasonOf } from "../../store/os-keychain.js";
import { UsageError, UserError } from "../errors.js";
import { FileCredentialStore } from "./file-store.js";
import {
  abandonedKeychainCalls,
  type KeychainStoreOptions,
  openKeychainStore,
} from "./keychain-store.js";
import type { CredentialStore, StoredLogin } from "./types.js";

/**
 * Where login keys live: the OS keychain when one works, else a private file.
 * GATEWAY_CREDENTIAL_STORE=file|keychain forces one; GATEWAY_API_KEY overrides both and is
 * never written anywhere.
 */

export type { CredentialStore, StoredLogin } from "./types.js";

export const defaultProfile = "default";

/** Letters and digits (any script), then also `.`, `_` and `-`: a name every hint can repeat. */
const profileName = /^[\p{L}\p{N}][\p{L}\p{N}._-]{0,63}$/u;

/**
 * `--profile` as every command takes it: a name the commands it prints (`login --profile NAME`)
 * carry as they are, so none that is empty, spaced or holds a terminal's control characters
 * (the command line's mistake, exit code 2).
 */
export function profileFlag(value: string): string {
  if (!profileName.test(value))
    throw new UsageError(
      "--profile must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, e.g. --profile staging",
    );
  return value;
}

/** `command` for `profile`: the default profile needs no flag. */
export function withProfile(command: string, profile: string): string {
  return profile === defaultProfile ? command : `${command} --profile ${profile}`;
}

type Mode = "auto" | "file" | "keychain";

function credentialMode(env: NodeJS.ProcessEnv): Mode {
  const raw = env.GATEWAY_CREDENTIAL_STORE?.trim().toLowerCase();
  if (!raw || raw === "auto") return "auto";
  if (raw === "file" || raw === "keychain") return raw;
  throw new UserError(`GATEWAY_CREDENTIAL_STORE must be "file" or "keychain", got "${raw}"`);
}

export interface CredentialStores {
  /** Where a new login key is written. */
  primary: CredentialStore;
  /** Every store to look in, primary first (a key saved to the file earlier is still found). */
  all: CredentialStore[];
  /** Set when the keychain was wanted but does not work: why, for the one-time notice. */
  keychainUnavailable?: string;
  /**
   * The file, when the keychain is primary and not forced: where a key goes if the keychain that
   * passed its probe fails when the key is written (a Secret Service waiting on an unlock prompt).
   */
  fallback?: CredentialStore;
}

/** What the stores are opened from: the process's own, or a test's temp file and fake keychain. */
export interface CredentialSources {
  env?: NodeJS.ProcessEnv;
  file?: CredentialStore;
  keychain?: KeychainStoreOptions;
}

export async function openCredentialStores({
  env = process.env,
  file = new FileCredentialStore(),
  keychain,
}: CredentialSources = {}): Promise<CredentialStores> {
  const mode = credentialMode(env);
  if (mode === "file") return { primary: file, all: [file] };
  const probe = await openKeychainStore(keychain);
  if (probe.ok)
    return mode === "keychain"
      ? { primary: probe.store, all: [probe.store] }
      : { primary: probe.store, all: [probe.store, file], fallback: file };
  if (mode === "keychain") {
    throw new UserError(
      `GATEWAY_CREDENTIAL_STORE=keychain but no OS keychain is available (${probe.reason})`,
    );
  }
  return { primary: file, all: [file], keychainUnavailable: probe.reason };
}

/** The notice printed once when a key goes to the file because no keychain works. */
export function fileFallbackNotice(reason: string, file: CredentialStore): string {
  return `no OS keychain available (${reason}); storing the key in ${file.location} (mode 0600)`;
}

/** A profile's login as one store holds it. */
export interface FoundLogin {
  login: StoredLogin;
  store: CredentialStore;
}

export interface ActiveCredential {
  key: string;
  /** Where it came from, for `whoami`: the env var, the keychain or the file. */
  source: string;
  /** The profile's stored login (none for GATEWAY_API_KEY). */
  stored?: FoundLogin;
  /** Older logins of the profile still stored elsewhere (`LoginLookup.replaced`). */
  replaced: FoundLogin[];
}

export interface LoginLookup {
  /** The profile's newest login. */
  found?: FoundLogin;
  /**
   * The profile's older logins in the other stores, newest first. A login written to the file
   * while the keychain was locked could not remove the keychain's, which is seen again once the
   * keychain opens: it was replaced all the same, so it is not the one to use.
   */
  replaced: FoundLogin[];
  /**
   * Why the OS keychain could not be read, when nothing was found: a login kept there (a locked
   * keychain, one that does not answer) is then unseen, not absent.
   */
  keychainUnreadable?: string;
}

/** When a login was saved, for ordering: one without a readable time counts as the oldest. */
function savedAtOf(login: StoredLogin): number {
  const at = Date.parse(String(login.savedAt));
  return Number.isNaN(at) ? 0 : at;
}

export async function lookUpLogin(stores: CredentialStores, profile: string): Promise<LoginLookup> {
  let keychainUnreadable = stores.keychainUnavailable;
  const logins: FoundLogin[] = [];
  for (const store of stores.all) {
    let login: StoredLogin | undefined;
    try {
      login = await store.get(profile);
    } catch (e) {
      // The file's own refusal (damaged, unreadable) already says what to do about it; with the
      // keychain's login in hand it does not stop a command, as when the file was never read.
      if (store.kind === "file" && logins.length === 0) throw e;
      if (store.kind === "keychain") keychainUnreadable = reasonOf(e);
      continue;
    }
    if (login) logins.push({ login, store });
  }
  // Stable: of two saved at once, the keychain's (listed first) wins.
  logins.sort((a, b) => savedAtOf(b.login) - savedAtOf(a.login));
  const [found, ...replaced] = logins;
  return found ? { found, replaced } : { replaced, keychainUnreadable };
}

/** No login to use: say so, and when the keychain could not be read, that it may be there. */
function notLoggedIn(profile: string, keychainUnreadable: string | undefined): UserError {
  const login = `run \`${cliCommand(withProfile("login", profile))}\` (or set GATEWAY_API_KEY)`;
  return new UserError(
    keychainUnreadable === undefined
      ? `not logged in; ${login}`
      : `not logged in, or the login is in the OS keychain, which could not be read (${keychainUnreadable}); unlock the keychain and try again, or ${login}`,
  );
}

/** GATEWAY_API_KEY first, then the profile's stored login key; with neither, a UserError. */
export async function activeCredential(profile: string): Promise<ActiveCredential> {
  const fromEnv = process.env.GATEWAY_API_KEY?.trim();
  if (fromEnv) {
    // A key is printable ASCII: anything else (a smart quote from a chat app, a space inside)
    // could not even be sent in a header, and would read as the gateway being unreachable.
    if (!/^[\x21-\x7e]+$/.test(fromEnv))
      throw new UserError(
        "GATEWAY_API_KEY holds characters no key has (a typographic quote, a space or a line break?); paste the key again as plain text",
      );
    return { key: fromEnv, source: "GATEWAY_API_KEY environment variable", replaced: [] };
  }
  const { found, replaced, keychainUnreadable } = await lookUpLogin(
    await openCredentialStores(),
    profile,
  );
  if (!found) throw notLoggedIn(profile, keychainUnreadable);
  return {
    key: found.login.key,
    source: `${found.store.location}, profile "${profile}"`,
    stored: found,
    replaced,
  };
}

/**
 * Called when a command has finished: a keychain call that timed out (a Secret Service waiting
 * on an unlock prompt, say) would otherwise keep the finished process alive.
 */
function exitIfKeychainHangs(): void {
  if (abandonedKeychainCalls() > 0) process.exit(process.exitCode ?? 0);
}

/** Wraps a command action so it ends when it is done, whatever the keychain is up to. */
export function endingPromptly<A extends unknown[]>(
  action: (...args: A) => Promise<void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    await action(...args);
    exitIfKeychainHangs();
  };
}
