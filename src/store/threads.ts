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
 * A row is its account's (keyed on the account and the reply's id): another account's row under
 * the same id is neither found nor replaced.
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
