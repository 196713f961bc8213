import type { Statement } from "better-sqlite3";
import {
  type ApprovedKey,
  type DeviceCodeRow,
  type DeviceCodesRepository,
  loginKeyRow,
  type NewDeviceCode,
  type PendingCodes,
} from "../device-codes.js";
import type { KeyRowWriter } from "./accounts.js";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";

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
