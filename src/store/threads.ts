import type { Statement } from "better-sqlite3";
import type { DB } from "./db.js";

/** A thread's conversation: what the model saw, up to and including the reply it is named by. */
export interface ThreadConversation {
  system?: unknown;
  tools?: unknown;
  messages: unknown[];
}

/** How long a thread can be continued after its last reply, as Anthropic keeps them. */
export const THREAD_TTL_MS = 30 * 24 * 60 * 60 * 1000;
/** A longer conversation is not held: continuing it gets thread_not_found, and the client resends it. */
export const THREAD_MAX_BYTES = 4 * 1024 * 1024;

/**
 * The message threads the gateway holds for the models it translates to (an anthropic-wire
 * provider holds its own). Each reply's row replaces the one it continued, so a thread is one row.
 */
export interface ThreadsRepository {
  find(accountId: string, messageId: string, now: number): Promise<ThreadConversation | undefined>;
  /** Replaces the row of `previousId`; a conversation past the size bound is not kept. */
  save(
    accountId: string,
    messageId: string,
    conversation: ThreadConversation,
    previousId: string | undefined,
    now: number,
  ): Promise<void>;
}

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
