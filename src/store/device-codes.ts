import type { Statement } from "better-sqlite3";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";
import type { SecretBox } from "./secret-box.js";
import type { KeyRowWriter, NewKeyRow } from "./sqlite-accounts.js";

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

export class SqliteDeviceCodes implements DeviceCodesRepository {
  private readonly insert: Statement;
  private readonly userCodeTaken: Statement;
  private readonly pendingCount: Statement;
  private readonly pendingForAddress: Statement;
  private readonly purgeOld: Statement;
  private readonly rowByHash: Statement;
  private readonly rowByUserCode: Statement;
  private readonly notePollRow: Statement;
  private readonly slowDownRow: Statement;
  private readonly approveRow: Statement;
  private readonly denyRow: Statement;
  private readonly claimRow: Statement;
  private readonly consumeRow: Statement;
  private readonly cancelRow: Statement;
  private readonly dropSealed: Statement;
  private readonly immediate: <T>(fn: () => T) => T;

  /** `keys`: the one writer of key rows, so its cache follows what device logins mint and revoke. */
  constructor(
    db: DB,
    private readonly keys: KeyRowWriter,
  ) {
    this.immediate = immediateTransactions(db);
    this.insert = db.prepare(
      `INSERT INTO device_codes (device_code_hash, user_code, client_name, client_ip, status, interval_seconds, created_at, expires_at)
       VALUES (?, ?, ?, ?, 'pending', ?, ?, ?)`,
    );
    this.userCodeTaken = db.prepare("SELECT 1 FROM device_codes WHERE user_code = ?");
    this.pendingCount = db.prepare(
      "SELECT count(*) AS count, min(expires_at) AS firstExpiry FROM device_codes WHERE status = 'pending' AND expires_at > ?",
    );
    this.pendingForAddress = db.prepare(
      `SELECT count(*) AS count, min(expires_at) AS firstExpiry FROM device_codes
        WHERE client_ip = ? AND status = 'pending' AND expires_at > ?`,
    );
    this.purgeOld = db.prepare("DELETE FROM device_codes WHERE expires_at < ?");
    this.rowByHash = db.prepare("SELECT * FROM device_codes WHERE device_code_hash = ?");
    this.rowByUserCode = db.prepare("SELECT * FROM device_codes WHERE user_code = ?");
    this.notePollRow = db.prepare(
      "UPDATE device_codes SET last_poll_at = ? WHERE device_code_hash = ?",
    );
    this.slowDownRow = db.prepare(
      "UPDATE device_codes SET last_poll_at = ?, interval_seconds = interval_seconds + ? WHERE device_code_hash = ?",
    );
    this.approveRow = db.prepare(
      `UPDATE device_codes SET status = 'approved', account_id = ?, key_id = ?, key_value_sealed = ?
        WHERE device_code_hash = ? AND status = 'pending' AND (account_id IS NULL OR account_id = ?)`,
    );
    this.denyRow = db.prepare(
      `UPDATE device_codes SET status = 'denied'
        WHERE device_code_hash = ? AND status = 'pending' AND (account_id IS NULL OR account_id = ?)`,
    );
    this.claimRow = db.prepare(
      `UPDATE device_codes SET account_id = ?
        WHERE device_code_hash = ? AND status = 'pending' AND (account_id IS NULL OR account_id = ?)`,
    );
    this.consumeRow = db.prepare(
      `UPDATE device_codes SET status = 'consumed', key_value_sealed = NULL
        WHERE device_code_hash = ? AND status = 'approved'`,
    );
    this.cancelRow = db.prepare(
      `UPDATE device_codes SET status = 'cancelled', key_value_sealed = NULL
        WHERE device_code_hash = ? AND status IN ('pending', 'approved')`,
    );
    this.dropSealed = db.prepare(
      "UPDATE device_codes SET key_value_sealed = NULL WHERE device_code_hash = ?",
    );
  }

  async issue<Refusal>(
    code: NewDeviceCode,
    options: {
      purgeBefore: number;
      newUserCode: () => string;
      refuse: (pending: { address: PendingCodes; all: PendingCodes }) => Refusal | undefined;
    },
  ): Promise<{ ok: true; userCode: string } | { ok: false; refusal: Refusal }> {
    return this.immediate(() => {
      this.purgeOld.run(options.purgeBefore);
      const refusal = options.refuse({
        address: this.pendingForAddress.get(code.clientAddress, code.createdAt) as PendingCodes,
        all: this.pendingCount.get(code.createdAt) as PendingCodes,
      });
      if (refusal !== undefined) return { ok: false as const, refusal };
      let userCode = options.newUserCode();
      while (this.userCodeTaken.get(userCode)) userCode = options.newUserCode();
      this.insert.run(
        code.deviceCodeHash,
        userCode,
        code.clientName,
        code.clientAddress,
        code.intervalSeconds,
        code.createdAt,
        code.expiresAt,
      );
      return { ok: true as const, userCode };
    });
  }

  async byUserCode(userCode: string): Promise<DeviceCodeRow | undefined> {
    return this.rowByUserCode.get(userCode) as DeviceCodeRow | undefined;
  }

  async byHash(deviceCodeHash: string): Promise<DeviceCodeRow | undefined> {
    return this.rowByHash.get(deviceCodeHash) as DeviceCodeRow | undefined;
  }

  async notePoll(deviceCodeHash: string, now: number): Promise<void> {
    this.notePollRow.run(now, deviceCodeHash);
  }

  async slowDown(deviceCodeHash: string, now: number, stepSeconds: number): Promise<void> {
    this.slowDownRow.run(now, stepSeconds, deviceCodeHash);
  }

  async approve(deviceCodeHash: string, key: ApprovedKey, now: number): Promise<boolean> {
    return this.immediate(() => {
      const approved =
        this.approveRow.run(
          key.accountId,
          key.keyId,
          key.keyValueSealed,
          deviceCodeHash,
          key.accountId,
        ).changes > 0;
      if (approved) this.keys.insertKeyRow(loginKeyRow(key, now));
      return approved;
    });
  }

  async claim(deviceCodeHash: string, accountId: string): Promise<boolean> {
    return this.claimRow.run(accountId, deviceCodeHash, accountId).changes > 0;
  }

  async deny(deviceCodeHash: string, accountId: string): Promise<boolean> {
    return this.denyRow.run(deviceCodeHash, accountId).changes > 0;
  }

  async consume(deviceCodeHash: string): Promise<boolean> {
    return this.consumeRow.run(deviceCodeHash).changes > 0;
  }

  async cancel(deviceCodeHash: string, now: number): Promise<boolean> {
    return this.immediate(() => {
      this.revokeApprovedKey(deviceCodeHash, now);
      return this.cancelRow.run(deviceCodeHash).changes > 0;
    });
  }

  async abandonKey(deviceCodeHash: string, now: number): Promise<void> {
    this.immediate(() => {
      if (this.revokeApprovedKey(deviceCodeHash, now)) this.dropSealed.run(deviceCodeHash);
    });
  }

  /**
   * Revokes the key of an approved code; true when the code was approved. The store's key cache
   * needs no word of it: the key's value was never handed out, so no lookup can have cached it.
   */
  private revokeApprovedKey(deviceCodeHash: string, now: number): boolean {
    const row = this.rowByHash.get(deviceCodeHash) as DeviceCodeRow | undefined;
    if (row?.status !== "approved") return false;
    if (row.key_id) this.keys.revokeKey(row.key_id, now);
    return true;
  }
}
