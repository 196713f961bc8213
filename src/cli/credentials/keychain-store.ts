import { randomBytes } from "node:crypto";
import type { CredentialStore, StoredLogin } from "./types.js";

/**
 * The OS keychain through keytar (Secret Service on Linux, Keychain on macOS, Credential Vault on
 * Windows). keytar is an optional, archived native dependency: it is imported only when needed,
 * and every call is bounded by a timeout because a Secret Service can hang instead of failing.
 */

export const keychainService = "model-gateway";
export const keychainTimeoutMs = 1500;

interface KeytarApi {
  getPassword(service: string, account: string): Promise<string | null>;
  setPassword(service: string, account: string, password: string): Promise<void>;
  deletePassword(service: string, account: string): Promise<boolean>;
}

function isKeytarApi(value: unknown): value is KeytarApi {
  const v = value as Partial<KeytarApi> | undefined;
  return (
    typeof v?.getPassword === "function" &&
    typeof v.setPassword === "function" &&
    typeof v.deletePassword === "function"
  );
}

/** Native keychain calls given up on but still running (they keep the event loop alive). */
let abandonedCalls = 0;

export function abandonedKeychainCalls(): number {
  return abandonedCalls;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
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

/** The first line of a keytar error is the useful part, e.g. "Cannot autolaunch D-Bus without X11 $DISPLAY". */
function reasonOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split("\n")[0].trim() || "unknown keychain error";
}

async function loadKeytar(): Promise<KeytarApi> {
  // A variable specifier keeps TypeScript from requiring the optional package at build time.
  const specifier = "keytar";
  let mod: unknown;
  try {
    mod = await import(specifier);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new Error(
      code === "ERR_MODULE_NOT_FOUND"
        ? "keytar is not installed"
        : `keytar failed to load: ${reasonOf(err)}`,
    );
  }
  const api = (mod as { default?: unknown }).default ?? mod;
  if (!isKeytarApi(api)) throw new Error("keytar loaded without its API");
  return api;
}

export class KeychainCredentialStore implements CredentialStore {
  readonly kind = "keychain";

  constructor(
    private readonly keytar: KeytarApi,
    readonly service = keychainService,
    private readonly timeoutMs = keychainTimeoutMs,
  ) {}

  get location(): string {
    return `OS keychain (service "${this.service}")`;
  }

  async get(profile: string): Promise<StoredLogin | undefined> {
    const text = await withTimeout(this.keytar.getPassword(this.service, profile), this.timeoutMs);
    if (!text) return undefined;
    try {
      return JSON.parse(text) as StoredLogin;
    } catch {
      // An entry this CLI did not write: treat it as absent rather than fail every command.
      return undefined;
    }
  }

  async set(profile: string, login: StoredLogin): Promise<void> {
    await withTimeout(
      this.keytar.setPassword(this.service, profile, JSON.stringify(login)),
      this.timeoutMs,
    );
  }

  async delete(profile: string): Promise<boolean> {
    return withTimeout(this.keytar.deletePassword(this.service, profile), this.timeoutMs);
  }
}

export type KeychainProbe =
  | { ok: true; store: KeychainCredentialStore }
  | { ok: false; reason: string };

/**
 * Loads keytar and proves the keychain works with a set/get/delete round trip: a Secret Service
 * that is present but locked fails only when written to.
 */
export async function openKeychainStore(
  service = keychainService,
  timeoutMs = keychainTimeoutMs,
): Promise<KeychainProbe> {
  try {
    const keytar = await withTimeout(loadKeytar(), timeoutMs);
    const account = `probe-${process.pid}-${randomBytes(6).toString("hex")}`;
    const secret = randomBytes(12).toString("hex");
    await withTimeout(keytar.setPassword(service, account, secret), timeoutMs);
    const readBack = await withTimeout(keytar.getPassword(service, account), timeoutMs);
    await withTimeout(keytar.deletePassword(service, account), timeoutMs);
    if (readBack !== secret)
      return { ok: false, reason: "the keychain did not return what was stored" };
    return { ok: true, store: new KeychainCredentialStore(keytar, service, timeoutMs) };
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  }
}
