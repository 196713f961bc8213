import type pg from "pg";
import {
  type ApprovedKey,
  type DeviceCodeRow,
  type DeviceCodesRepository,
  loginKeyRow,
  type NewDeviceCode,
  type PendingCodes,
} from "../device-codes.js";
import type { SecretBox } from "../secret-box.js";
import type { PostgresKeyRowWriter } from "./key-rows.js";
import { inTransaction, lockFor } from "./transaction.js";

/**
 * The device-authorization rows on Postgres (see DeviceCodesRepository). Every step of a login is
 * a conditional update of the row, so a code started on one gateway, approved on another and
 * polled on a third is approved once and handed out once, minting exactly one key.
 */
export class PostgresDeviceCodes implements DeviceCodesRepository {
  /**
   * `keys`: the one writer of key rows, so its cache follows what device logins mint and revoke.
   * `sealingKey`: the secret key every gateway on the database is given, so a login approved on
   * one gateway is collected on another.
   */
  constructor(
    private readonly pool: pg.Pool,
    private readonly keys: PostgresKeyRowWriter,
    readonly sealingKey?: SecretBox,
  ) {}

  async issue<Refusal>(
    code: NewDeviceCode,
    options: {
      purgeBefore: number;
      newUserCode: () => string;
      refuse: (pending: { address: PendingCodes; all: PendingCodes }) => Refusal | undefined;
    },
  ): Promise<{ ok: true; userCode: string } | { ok: false; refusal: Refusal }> {
    return inTransaction(this.pool, async (client) => {
      // The pending counts decide whether to insert: gateways issuing at once take turns.
      await lockFor(client, "deviceCodes");
      await client.query({
        name: "device_codes_purge",
        text: "DELETE FROM device_codes WHERE expires_at < $1",
        values: [options.purgeBefore],
      });
      const address = await client.query<PendingCodes>({
        name: "device_codes_pending_for_address",
        text: `SELECT count(*) AS count, min(expires_at) AS "firstExpiry" FROM device_codes
          WHERE client_ip = $1 AND status = 'pending' AND expires_at > $2`,
        values: [code.clientAddress, code.createdAt],
      });
      const all = await client.query<PendingCodes>({
        name: "device_codes_pending",
        text: `SELECT count(*) AS count, min(expires_at) AS "firstExpiry" FROM device_codes
          WHERE status = 'pending' AND expires_at > $1`,
        values: [code.createdAt],
      });
      const refusal = options.refuse({ address: address.rows[0], all: all.rows[0] });
      if (refusal !== undefined) return { ok: false as const, refusal };
      let userCode = options.newUserCode();
      while (await this.userCodeTaken(client, userCode)) userCode = options.newUserCode();
      await client.query({
        name: "device_codes_insert",
        text: `INSERT INTO device_codes (device_code_hash, user_code, client_name, client_ip, status,
            interval_seconds, created_at, expires_at)
          VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7)`,
        values: [
          code.deviceCodeHash,
          userCode,
          code.clientName,
          code.clientAddress,
          code.intervalSeconds,
          code.createdAt,
          code.expiresAt,
        ],
      });
      return { ok: true as const, userCode };
    });
  }

  async byUserCode(userCode: string): Promise<DeviceCodeRow | undefined> {
    const result = await this.pool.query<DeviceCodeRow>({
      name: "device_codes_by_user_code",
      text: "SELECT * FROM device_codes WHERE user_code = $1",
      values: [userCode],
    });
    return result.rows[0];
  }

  async byHash(deviceCodeHash: string): Promise<DeviceCodeRow | undefined> {
    const result = await this.pool.query<DeviceCodeRow>({
      name: "device_codes_by_hash",
      text: "SELECT * FROM device_codes WHERE device_code_hash = $1",
      values: [deviceCodeHash],
    });
    return result.rows[0];
  }

  async notePoll(deviceCodeHash: string, now: number): Promise<void> {
    await this.pool.query({
      name: "device_codes_note_poll",
      text: "UPDATE device_codes SET last_poll_at = $1 WHERE device_code_hash = $2",
      values: [now, deviceCodeHash],
    });
  }

  async slowDown(deviceCodeHash: string, now: number, stepSeconds: number): Promise<void> {
    await this.pool.query({
      name: "device_codes_slow_down",
      text: `UPDATE device_codes SET last_poll_at = $1, interval_seconds = interval_seconds + $2
        WHERE device_code_hash = $3`,
      values: [now, stepSeconds, deviceCodeHash],
    });
  }

  async approve(deviceCodeHash: string, key: ApprovedKey, now: number): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      const approved = await client.query({
        name: "device_codes_approve",
        text: `UPDATE device_codes SET status = 'approved', account_id = $1, key_id = $2,
            key_value_sealed = $3
          WHERE device_code_hash = $4 AND status = 'pending'
            AND (account_id IS NULL OR account_id = $1)`,
        values: [key.accountId, key.keyId, key.keyValueSealed, deviceCodeHash],
      });
      if (approved.rowCount !== 1) return false;
      await this.keys.insertKeyRow(client, loginKeyRow(key, now));
      return true;
    });
  }

  async claim(deviceCodeHash: string, accountId: string): Promise<boolean> {
    const result = await this.pool.query({
      name: "device_codes_claim",
      text: `UPDATE device_codes SET account_id = $2
        WHERE device_code_hash = $1 AND status = 'pending' AND (account_id IS NULL OR account_id = $2)`,
      values: [deviceCodeHash, accountId],
    });
    return result.rowCount === 1;
  }

  async deny(deviceCodeHash: string, accountId: string): Promise<boolean> {
    const result = await this.pool.query({
      name: "device_codes_deny",
      text: `UPDATE device_codes SET status = 'denied'
        WHERE device_code_hash = $1 AND status = 'pending' AND (account_id IS NULL OR account_id = $2)`,
      values: [deviceCodeHash, accountId],
    });
    return result.rowCount === 1;
  }

  async consume(deviceCodeHash: string): Promise<boolean> {
    const result = await this.pool.query({
      name: "device_codes_consume",
      text: `UPDATE device_codes SET status = 'consumed', key_value_sealed = NULL
        WHERE device_code_hash = $1 AND status = 'approved'`,
      values: [deviceCodeHash],
    });
    return result.rowCount === 1;
  }

  async cancel(deviceCodeHash: string, now: number): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      await this.revokeApprovedKey(client, deviceCodeHash, now);
      const cancelled = await client.query({
        name: "device_codes_cancel",
        text: `UPDATE device_codes SET status = 'cancelled', key_value_sealed = NULL
          WHERE device_code_hash = $1 AND status IN ('pending', 'approved')`,
        values: [deviceCodeHash],
      });
      return cancelled.rowCount === 1;
    });
  }

  async abandonKey(deviceCodeHash: string, now: number): Promise<void> {
    await inTransaction(this.pool, async (client) => {
      if (!(await this.revokeApprovedKey(client, deviceCodeHash, now))) return;
      await client.query({
        name: "device_codes_drop_sealed",
        text: "UPDATE device_codes SET key_value_sealed = NULL WHERE device_code_hash = $1",
        values: [deviceCodeHash],
      });
    });
  }

  private async userCodeTaken(client: pg.PoolClient, userCode: string): Promise<boolean> {
    const result = await client.query({
      name: "device_codes_user_code_taken",
      text: "SELECT 1 FROM device_codes WHERE user_code = $1",
      values: [userCode],
    });
    return result.rowCount === 1;
  }

  /**
   * Revokes the key of an approved code, locking the row first so that a consume on another
   * gateway cannot hand the key out meanwhile; true when the code was approved. No key cache
   * needs word of it: the key's value was never handed out, so no lookup can have cached it.
   */
  private async revokeApprovedKey(
    client: pg.PoolClient,
    deviceCodeHash: string,
    now: number,
  ): Promise<boolean> {
    const result = await client.query<Pick<DeviceCodeRow, "status" | "key_id">>({
      name: "device_codes_lock",
      text: "SELECT status, key_id FROM device_codes WHERE device_code_hash = $1 FOR UPDATE",
      values: [deviceCodeHash],
    });
    const row = result.rows[0];
    if (row?.status !== "approved") return false;
    if (row.key_id) await this.keys.revokeKey(client, row.key_id, now);
    return true;
  }
}
