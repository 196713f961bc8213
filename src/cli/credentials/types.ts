/** What `gateway login` keeps per profile. The key is the secret; the rest helps later commands. */
export interface StoredLogin {
  key: string;
  baseUrl: string;
  keyId: string;
  accountId: string;
  savedAt: string;
}

/** A place for login keys: the OS keychain or a private file. */
export interface CredentialStore {
  readonly kind: "keychain" | "file";
  /** Where keys live, for `whoami` and notices (never the key itself). */
  readonly location: string;
  get(profile: string): Promise<StoredLogin | undefined>;
  set(profile: string, login: StoredLogin): Promise<void>;
  /** True when there was something to delete. */
  delete(profile: string): Promise<boolean>;
}
