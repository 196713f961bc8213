import type pg from "pg";
import type { NewKeyRow } from "../key-rows.js";
import { notifyChange } from "./notify.js";

/**
 * What other repositories may do to key rows on Postgres, inside their own transactions (`client`
 * is the transaction's connection): a device login mints its key and revokes it. Each write
 * announces the key's change in that transaction, so every gateway's cached keys follow it once it
 * commits. `nonce` is given by a writer that waits for its own announcement to come back.
 */
export interface PostgresKeyRowWriter {
  insertKeyRow(client: pg.PoolClient, row: NewKeyRow, nonce?: string): Promise<void>;
  revokeKey(client: pg.PoolClient, id: string, now: number, nonce?: string): Promise<boolean>;
}

/** The key-row statements themselves, with their announcements. */
export class PostgresKeyRows implements PostgresKeyRowWriter {
  async insertKeyRow(client: pg.PoolClient, row: NewKeyRow, nonce?: string): Promise<void> {
    await client.query({
      name: "keys_insert",
      text: `INSERT INTO api_keys (id, account_id, hash, prefix, label, kind, parent_key_id, created_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
      values: [
        row.id,
        row.accountId,
        row.hash,
        row.prefix,
        row.label,
        row.kind,
        row.parentKeyId,
        row.createdAt,
      ],
    });
    await notifyChange(client, { t: "key", id: row.id }, nonce);
  }

  async revokeKey(
    client: pg.PoolClient,
    id: string,
    now: number,
    nonce?: string,
  ): Promise<boolean> {
    const result = await client.query({
      name: "keys_revoke",
      text: "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
      values: [now, id],
    });
    if (result.rowCount !== 1) return false;
    await notifyChange(client, { t: "key", id }, nonce);
    return true;
  }
}
