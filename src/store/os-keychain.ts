import { randomBytes } from "node:crypto";
import { clearTimeout, setTimeout } from "../host-timers.js";

/**
 * The OS keychain through @napi-rs/keyring (Secret Service on Linux, Keychain on macOS, Credential
 * Manager on Windows; prebuilt binaries, nothing compiles at install). It is an optional dependency
 * imported only when needed, and every call is bounded by a timeout because a Secret Service can
 * hang instead of failing. The CLI keeps login keys here; the gateway, BYOK sealing keys.
 */

export const keychainService = "model-gateway";
export const keychainTimeoutMs = 1500;

/** One secret per (service, account), the shape of the binding's AsyncEntry. */
export interface KeychainEntry {
  getPassword(): Promise<string | null>;
  setPassword(password: string): Promise<void>;
  deletePassword(): Promise<boolean>;
}

export interface KeychainApi {
  entry(service: string, account: string): KeychainEntry;
}

type EntryConstructor = new (service: string, account: string) => KeychainEntry;

function isEntryConstructor(value: unknown): value is EntryConstructor {
  const proto = (value as { prototype?: Partial<KeychainEntry> } | undefined)?.prototype;
  return (
    typeof value === "function" &&
    typeof proto?.getPassword === "function" &&
    typeof proto.setPassword === "function" &&
    typeof proto.deletePassword === "function"
  );
}

/** Native keychain calls given up on but still running (they keep the event loop alive). */
let abandonedCalls = 0;

export function abandonedKeychainCalls(): number {
  return abandonedCalls;
}

export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      abandonedCalls++;
      void promise.then(
        () => abandonedCalls--,
        () => abandonedCalls--,
      );
      reject(new Error(`the keychain did not answer within ${ms / 1000} s`));
    }, ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The first line of a keychain error is the useful part. */
export function reasonOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split("\n")[0].trim() || "unknown keychain error";
}

const keyringPackage = "@napi-rs/keyring";

async function loadKeyring(): Promise<KeychainApi> {
  // A variable specifier keeps TypeScript from requiring the optional package at build time.
  const specifier = keyringPackage;
  let mod: unknown;
  try {
    mod = await import(specifier);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new Error(
      code === "ERR_MODULE_NOT_FOUND"
        ? `${keyringPackage} is not installed`
        : `${keyringPackage} failed to load: ${reasonOf(err)}`,
    );
  }
  const exports = mod as { AsyncEntry?: unknown; default?: { AsyncEntry?: unknown } };
  const AsyncEntry = exports.AsyncEntry ?? exports.default?.AsyncEntry;
  if (!isEntryConstructor(AsyncEntry)) throw new Error(`${keyringPackage} loaded without its API`);
  return { entry: (service, account) => new AsyncEntry(service, account) };
}

export type KeychainOpening = { ok: true; keyring: KeychainApi } | { ok: false; reason: string };

/**
 * Loads the keyring binding and proves the keychain works with a set/get/delete round trip: a
 * Secret Service that is present but locked fails only when written to. `load` is the binding's
 * loader, which a test replaces with a fake keychain.
 */
export async function openKeychain(
  service = keychainService,
  timeoutMs = keychainTimeoutMs,
  load: () => Promise<KeychainApi> = loadKeyring,
): Promise<KeychainOpening> {
  try {
    const keyring = await withTimeout(load(), timeoutMs);
    const probe = keyring.entry(service, `probe-${process.pid}-${randomBytes(6).toString("hex")}`);
    const secret = randomBytes(12).toString("hex");
    await withTimeout(probe.setPassword(secret), timeoutMs);
    const readBack = await withTimeout(probe.getPassword(), timeoutMs);
    await withTimeout(probe.deletePassword(), timeoutMs);
    if (readBack !== secret)
      return { ok: false, reason: "the keychain did not return what was stored" };
    return { ok: true, keyring };
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  }
}

/**
 * The secret stored for (service, account), read without the probe `openKeychain` writes: for a
 * reader that must leave the keychain as it found it. undefined when there is none, or no
 * keychain answers (the caller names what is missing).
 */
export async function readKeychain(
  service: string,
  account: string,
  timeoutMs = keychainTimeoutMs,
  load: () => Promise<KeychainApi> = loadKeyring,
): Promise<string | undefined> {
  try {
    const keyring = await withTimeout(load(), timeoutMs);
    const stored = await withTimeout(keyring.entry(service, account).getPassword(), timeoutMs);
    return stored ?? undefined;
  } catch {
    return undefined;
  }
}
