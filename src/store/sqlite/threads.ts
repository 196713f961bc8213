import type { Statement } from "better-sqlite3";
import {
  THREAD_MAX_BYTES,
  THREAD_TTL_MS,
  type ThreadConversation,
  type ThreadsRepository,
} from "../threads.js";
import type { DB } from "./db.js";

export class SqliteThreads implements ThreadsRepository {
  private readonly get: Statement;
  private readonly put: Statement;
  private readonly drop: Statement;
  private readonly prune: Statement;

  constructor(db: DB) {
    this.get = db.prepare(
      "SELECT conversation_json FROM message_threads WHERE message_id = ? AND account_id = ? AND expires_at > ?",
    );
    this.put = db.prepare(
      "INSERT OR REPLACE INTO message_threads (message_id, account_id, conversation_json, expires_at) VALUES (?, ?, ?, ?)",
    );
    this.drop = db.prepare("DELETE FROM message_threads WHERE message_id = ? AND account_id = ?");
    this.prune = db.prepare("DELETE FROM message_threads WHERE expires_at <= ?");
  }

  async find(
    accountId: string,
    messageId: string,
    now: number,
  ): Promise<ThreadConversation | undefined> {
    const row = this.get.get(messageId, accountId, now) as
      | { conversation_json: string }
      | undefined;
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
    if (previousId) this.drop.run(previousId, accountId);
    this.prune.run(now);
    if (Buffer.byteLength(json) > THREAD_MAX_BYTES) return;
    this.put.run(messageId, accountId, json, now + THREAD_TTL_MS);
  }
}
