import {
  type KeychainApi,
  keychainService,
  keychainTimeoutMs,
  openKeychain,
  withTimeout,
} from "../../store/os-keychain.js";
import type { CredentialStore, StoredLogin } from "./types.js";

/** Login keys in the OS keychain (`store/os-keychain.ts`), one entry per profile. */

export {
  abandonedKeychainCalls,
  keychainService,
  keychainTimeoutMs,
} from "../../store/os-keychain.js";

export class KeychainCredentialStore implements CredentialStore {
  readonly kind = "keychain";

  constructor(
    private readonly keyring: KeychainApi,
    readonly service = keychainService,
    private readonly timeoutMs = keychainTimeoutMs,
  ) {}

  get location(): string {
    return `OS keychain (service "${this.service}")`;
  }

  async get(profile: string): Promise<StoredLogin | undefined> {
    const text = await withTimeout(
      this.keyring.entry(this.service, profile).getPassword(),
      this.timeoutMs,
    );
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
      this.keyring.entry(this.service, profile).setPassword(JSON.stringify(login)),
      this.timeoutMs,
    );
  }

  async delete(profile: string): Promise<boolean> {
    return withTimeout(this.keyring.entry(this.service, profile).deletePassword(), this.timeoutMs);
  }
}

export type KeychainProbe =
  | { ok: true; store: KeychainCredentialStore }
  | { ok: false; reason: string };

export interface KeychainStoreOptions {
  service?: string;
  timeoutMs?: number;
  /** The OS keychain's binding, or a test's fake of it. */
  keyring?: () => Promise<KeychainApi>;
}

/** The keychain's store of login keys, once a round trip proved the keychain works. */
export async function openKeychainStore({
  service = keychainService,
  timeoutMs = keychainTimeoutMs,
  keyring,
}: KeychainStoreOptions = {}): Promise<KeychainProbe> {
  const opened = await openKeychain(service, timeoutMs, keyring);
  if (!opened.ok) return opened;
  return { ok: true, store: new KeychainCredentialStore(opened.keyring, service, timeoutMs) };
}
