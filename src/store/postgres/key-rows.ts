import type pg from "pg";
import type { NewKeyRow } from "../sqlite-accounts.js";

/**
 * What other repositories may do to key rows on Postgres, inside their own transactions (`client`
 * is the transaction's connection): a device login mints its key and revokes it. The accounts
 * repository on Postgres is the one writer of key rows, and drops its cached keys on a revoke.
 */
export interface PostgresKeyRowWriter {
  insertKeyRow(client: pg.PoolClient, row: NewKeyRow): Promise<void>;
  revokeKey(client: pg.PoolClient, id: string, now: number): Promise<boolean>;
}

/** The key-row statements themselves, for a writer that keeps no cache. */
export class PostgresKeyRows implements PostgresKeyRowWriter {
  async insertKeyRow(client: pg.PoolClient, row: NewKeyRow): Promise<void> {
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
  }

  async revokeKey(client: pg.PoolClient, id: string, now: number): Promise<boolean> {
    const result = await client.query({
      name: "keys_revoke",
      text: "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
      values: [now, id],
    });
    return result.rowCount === 1;
  }
}
