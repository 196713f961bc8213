import type { NewKeyRow } from "./key-rows.js";
import type { SecretBox } from "./secret-box.js";

/**
 * The rows of the device-authorization grant (`gateway login`). The device code is stored only as
 * a hash; the login key minted at approval is held sealed until the one poll that collects it.
 */
export type DeviceStatus = "pending" | "approved" | "denied" | "consumed" | "cancelled";

export interface DeviceCodeRow {
  device_code_hash: string;
  user_code: string;
  client_name: string;
  status: DeviceStatus;
  account_id: string | null;
  key_id: string | null;
  key_value_sealed: string | null;
  interval_seconds: number;
  last_poll_at: number | null;
  created_at: number;
  expires_at: number;
}

/** Unexpired pending codes, and when the first of them expires. */
export interface PendingCodes {
  count: number;
  firstExpiry: number | null;
}

export interface NewDeviceCode {
  deviceCodeHash: string;
  clientName: string;
  clientAddress: string;
  intervalSeconds: number;
  createdAt: number;
  expiresAt: number;
}

/** The login key an approval mints, with its value already hashed and sealed. */
export interface ApprovedKey {
  accountId: string;
  keyId: string;
  keyHash: string;
  keyPrefix: string;
  label: string;
  keyValueSealed: string;
}

/** The key row an approval mints: a login key, its value sealed on the code's row until pickup. */
export function loginKeyRow(key: ApprovedKey, now: number): NewKeyRow {
  return {
    id: key.keyId,
    accountId: key.accountId,
    hash: key.keyHash,
    prefix: key.keyPrefix,
    label: key.label,
    kind: "login",
    parentKeyId: null,
    createdAt: now,
  };
}

export interface DeviceCodesRepository {
  /**
   * The key an approved login key is sealed under until its poll, when every gateway on the
   * database holds one (the key is then collected on any of them); absent, the process's own.
   */
  readonly sealingKey?: SecretBox;
  /**
   * In one transaction: forgets rows that expired before `purgeBefore`, asks `refuse` (given the
   * pending codes of the address and of everyone) whether to refuse, and if not inserts the code
   * under the first user code from `newUserCode` that no row holds.
   */
  issue<Refusal>(
    code: NewDeviceCode,
    options: {
      purgeBefore: number;
      newUserCode: () => string;
      refuse: (pending: { address: PendingCodes; all: PendingCodes }) => Refusal | undefined;
    },
  ): Promise<{ ok: true; userCode: string } | { ok: false; refusal: Refusal }>;
  byUserCode(userCode: string): Promise<DeviceCodeRow | undefined>;
  byHash(deviceCodeHash: string): Promise<DeviceCodeRow | undefined>;
  /** A poll on time: when it came. */
  notePoll(deviceCodeHash: string, now: number): Promise<void>;
  /** A poll too early: when it came, and the interval grows by `stepSeconds`. */
  slowDown(deviceCodeHash: string, now: number, stepSeconds: number): Promise<void>;
  /**
   * The account whose owner opened a pending code's approval page: from then on only that
   * account may approve or deny it. False when another account holds it or it is not pending.
   */
  claim(deviceCodeHash: string, accountId: string): Promise<boolean>;
  /**
   * A pending code, unclaimed or claimed by `key.accountId`, becomes approved and its login key is
   * inserted, in one transaction; false (no key) otherwise.
   */
  approve(deviceCodeHash: string, key: ApprovedKey, now: number): Promise<boolean>;
  /** A pending code, unclaimed or claimed by `accountId`, becomes denied; false otherwise. */
  deny(deviceCodeHash: string, accountId: string): Promise<boolean>;
  /** The approved key was handed out: the row is consumed and its sealed copy dropped. */
  consume(deviceCodeHash: string): Promise<boolean>;
  /**
   * A pending or approved code is cancelled, and the key of an approved one revoked, in one
   * transaction; false when the code is unknown or already finished.
   */
  cancel(deviceCodeHash: string, now: number): Promise<boolean>;
  /**
   * An approved code whose key nobody can collect any more: the key is revoked and its sealed
   * copy dropped, in one transaction (nothing happens to a code in another state).
   */
  abandonKey(deviceCodeHash: string, now: number): Promise<void>;
}
