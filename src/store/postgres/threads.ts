import type pg from "pg";
import {
  THREAD_MAX_BYTES,
  THREAD_TTL_MS,
  type ThreadConversation,
  type ThreadsRepository,
} from "../threads.js";
import { inTransaction } from "./transaction.js";

/** The message threads the gateway holds, on Postgres (see ThreadsRepository). */
export class PostgresThreads implements ThreadsRepository {
  constructor(private readonly pool: pg.Pool) {}

  async find(
    accountId: string,
    messageId: string,
    now: number,
  ): Promise<ThreadConversation | undefined> {
    const result = await this.pool.query<{ conversation_json: string }>({
      name: "threads_find",
      text: `SELECT conversation_json FROM message_threads
        WHERE message_id = $1 AND account_id = $2 AND expires_at > $3`,
      values: [messageId, accountId, now],
    });
    const row = result.rows[0];
    return row ? (JSON.parse(row.conversation_json) as ThreadConversation) : undefined;
  }

  async save(
    accountId: string,
    messageId: string,
    conversation: ThreadConversation,
    previousId: string | undefined,
    now: number,
  ): Promise<void> {
    const json = JSON.stringify(conversation);
    await inTransaction(this.pool, async (client) => {
      if (previousId) {
        await client.query({
          name: "threads_drop",
          text: "DELETE FROM message_threads WHERE message_id = $1 AND account_id = $2",
          values: [previousId, accountId],
        });
      }
      await client.query({
        name: "threads_prune",
        text: "DELETE FROM message_threads WHERE expires_at <= $1",
        values: [now],
      });
      if (Buffer.byteLength(json) > THREAD_MAX_BYTES) return;
      await client.query({
        name: "threads_put",
        text: `INSERT INTO message_threads (message_id, account_id, conversation_json, expires_at)
          VALUES ($1, $2, $3, $4)
          ON CONFLICT (account_id, message_id) DO UPDATE SET
            conversation_json = excluded.conversation_json, expires_at = excluded.expires_at`,
        values: [messageId, accountId, json, now + THREAD_TTL_MS],
      });
    });
  }
}
