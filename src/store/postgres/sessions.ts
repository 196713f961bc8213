import type pg from "pg";
import type { NewSession, OwnerSessionRow, SessionsRepository } from "../sessions.js";
import { inTransaction } from "./transaction.js";

/**
 * The owner's links and dashboard sessions on Postgres (see SessionsRepository). A link belongs
 * to the gateway that printed it (`instanceId`, as registered in `instances`): a start forgets
 * its own unused links and those of gateways whose lease ran out, never a live one's.
 */
export class PostgresSessions implements SessionsRepository {
  constructor(
    private readonly pool: pg.Pool,
    /** The gateway's id in `instances`; without one, its links are forgotten by the next start. */
    private readonly instanceId: string | null = null,
  ) {}

  async createOwnerLink(tokenHash: string, accountId: string, now: number): Promise<void> {
    await this.pool.query({
      name: "owner_links_insert",
      text: `INSERT INTO owner_links (token_hash, account_id, created_at, issuer)
        VALUES ($1, $2, $3, $4)`,
      values: [tokenHash, accountId, now, this.instanceId],
    });
  }

  async forgetUnusedOwnerLinks(): Promise<void> {
    await this.pool.query({
      name: "owner_links_forget_unused",
      text: `DELETE FROM owner_links WHERE used_at IS NULL AND (issuer IS NULL OR issuer = $1
        OR NOT EXISTS (SELECT 1 FROM instances
          WHERE instances.id = owner_links.issuer AND lease_until >= gateway_now_ms()))`,
      values: [this.instanceId],
    });
  }

  async redeemOwnerLink(
    linkHash: string,
    session: NewSession,
    now: number,
  ): Promise<string | undefined> {
    return inTransaction(this.pool, async (client) => {
      // Spent by a conditional update: the same link opened on two gateways at once opens one session.
      const spent = await client.query<{ account_id: string }>({
        name: "owner_links_spend",
        text: `UPDATE owner_links SET used_at = $2 WHERE token_hash = $1 AND used_at IS NULL
          RETURNING account_id`,
        values: [linkHash, now],
      });
      const accountId = spent.rows[0]?.account_id;
      if (accountId === undefined) return undefined;
      await client.query({
        name: "sessions_delete_expired",
        text: "DELETE FROM sessions WHERE expires_at <= $1",
        values: [now],
      });
      await client.query({
        name: "sessions_insert",
        text: `INSERT INTO sessions (token_hash, account_id, csrf_token, created_at, expires_at)
          VALUES ($1, $2, $3, $4, $5)`,
        values: [session.tokenHash, accountId, session.csrfTokenHash, now, session.expiresAt],
      });
      return accountId;
    });
  }

  async findSession(tokenHash: string): Promise<OwnerSessionRow | undefined> {
    const result = await this.pool.query<OwnerSessionRow>({
      name: "sessions_find",
      text: "SELECT account_id, expires_at FROM sessions WHERE token_hash = $1",
      values: [tokenHash],
    });
    return result.rows[0];
  }

  async deleteSession(tokenHash: string): Promise<void> {
    await this.pool.query({
      name: "sessions_delete",
      text: "DELETE FROM sessions WHERE token_hash = $1",
      values: [tokenHash],
    });
  }
}
