import type { Statement } from "better-sqlite3";
import {
  type ConversationRow,
  contextItems,
  conversationFromRow,
  type ItemKind,
  type ItemPage,
  type ItemPageQuery,
  type ItemRow,
  itemFromRow,
  itemIdsOf,
  itemIn,
  itemPage,
  keptItems,
  PRUNE_EVERY_MS,
  previousLink,
  type ResponseRow,
  type ResponsesStateRepository,
  replayedItems,
  responseFromRow,
  type StateItem,
  type StoredConversation,
  type StoredResponse,
  type StoredTurn,
  signedBefore,
  stateSql,
} from "../responses-state.js";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";

const sqliteParam = (n: number) => `@p${n}`;

export class SqliteResponsesState implements ResponsesStateRepository {
  private readonly immediate: <T>(fn: () => T) => T;
  private prunedAt = Number.NEGATIVE_INFINITY;
  private readonly s: Record<
    | "findResponse"
    | "chain"
    | "deleteResponse"
    | "putResponseItem"
    | "findItem"
    | "findHeldItem"
    | "findSigned"
    | "pruneResponseItems"
    | "putResponse"
    | "releaseNative"
    | "stretchChain"
    | "pruneResponses"
    | "pruneItems"
    | "pruneConversations"
    | "findConversation"
    | "putConversation"
    | "touchConversation"
    | "keepConversation"
    | "setMetadata"
    | "deleteConversation"
    | "items"
    | "putItem"
    | "findConversationItem"
    | "deleteItem",
    Statement
  >;

  constructor(db: DB) {
    this.immediate = immediateTransactions(db);
    this.s = {
      findResponse: db.prepare(
        "SELECT * FROM stored_responses WHERE account_id = ? AND id = ? AND expires_at > ?",
      ),
      chain: db.prepare(stateSql.chain(sqliteParam)),
      deleteResponse: db.prepare(
        "DELETE FROM stored_responses WHERE account_id = ? AND id = ? AND expires_at > ?",
      ),
      putResponse: db.prepare(
        `INSERT OR REPLACE INTO stored_responses (account_id, id, previous_response_id,
          native_provider_id, native_id, response_json, input_items_json, signed_reasoning,
          conversation_id, conversation_seq, conversation_count, created_at, expires_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ),
      releaseNative: db.prepare(stateSql.releaseNative(sqliteParam)),
      stretchChain: db.prepare(stateSql.stretchChain(sqliteParam, "MAX")),
      putResponseItem: db.prepare(
        "INSERT OR IGNORE INTO response_items (account_id, item_id, response_id) VALUES (?, ?, ?)",
      ),
      findItem: db.prepare(
        `SELECT r.* FROM response_items i JOIN stored_responses r
          ON r.account_id = i.account_id AND r.id = i.response_id
        WHERE i.account_id = ? AND i.item_id = ? AND r.expires_at > ?
        ORDER BY r.created_at DESC LIMIT 1`,
      ),
      findSigned: db.prepare(
        `SELECT r.* FROM response_items i JOIN stored_responses r
          ON r.account_id = i.account_id AND r.id = i.response_id
        WHERE i.account_id = ? AND i.item_id = ? AND r.expires_at > ?
          AND r.signed_reasoning IS NOT NULL`,
      ),
      // An item only a conversation holds: the one added last, if conversations share its id.
      findHeldItem: db.prepare(
        `SELECT i.item_json FROM conversation_items i JOIN conversations c
          ON c.account_id = i.account_id AND c.id = i.conversation_id
        WHERE i.account_id = ? AND i.item_id = ? AND i.kind = 'item' AND c.expires_at > ?
        ORDER BY i.seq DESC LIMIT 1`,
      ),
      pruneResponseItems: db.prepare(
        `DELETE FROM response_items WHERE NOT EXISTS (SELECT 1 FROM stored_responses r
          WHERE r.account_id = response_items.account_id AND r.id = response_items.response_id)`,
      ),
      pruneResponses: db.prepare("DELETE FROM stored_responses WHERE expires_at <= ?"),
      pruneItems: db.prepare(
        `DELETE FROM conversation_items WHERE (account_id, conversation_id) IN
          (SELECT account_id, id FROM conversations WHERE expires_at <= ?)`,
      ),
      pruneConversations: db.prepare("DELETE FROM conversations WHERE expires_at <= ?"),
      findConversation: db.prepare(
        `SELECT * FROM conversations
        WHERE account_id = ? AND id = ? AND expires_at > ? AND deleted_at IS NULL`,
      ),
      putConversation: db.prepare(
        `INSERT INTO conversations (account_id, id, metadata_json, created_at, expires_at)
        VALUES (?, ?, ?, ?, ?)`,
      ),
      touchConversation: db.prepare(
        `UPDATE conversations SET expires_at = ?
        WHERE account_id = ? AND id = ? AND expires_at > ? AND deleted_at IS NULL`,
      ),
      keepConversation: db.prepare(
        `UPDATE conversations SET expires_at = MAX(expires_at, ?)
        WHERE account_id = ? AND id = ? AND expires_at > ? AND deleted_at IS NULL`,
      ),
      setMetadata: db.prepare(
        `UPDATE conversations SET metadata_json = ?, expires_at = ?
        WHERE account_id = ? AND id = ? AND expires_at > ? AND deleted_at IS NULL RETURNING *`,
      ),
      // Its items stay, for an `item_reference` to them (as OpenAI keeps them), until it expires.
      deleteConversation: db.prepare(
        `UPDATE conversations SET deleted_at = ?
        WHERE account_id = ? AND id = ? AND expires_at > ? AND deleted_at IS NULL`,
      ),
      items: db.prepare(
        `SELECT item_id, item_json, kind, seq FROM conversation_items
        WHERE account_id = ? AND conversation_id = ? ORDER BY seq`,
      ),
      // One whose id a deleted item had is added anew, at the end.
      putItem: db.prepare(
        `INSERT INTO conversation_items (account_id, conversation_id, item_id, item_json, kind)
        VALUES (?, ?, ?, ?, ?)
        ON CONFLICT (account_id, conversation_id, item_id) DO UPDATE
          SET item_json = excluded.item_json, kind = excluded.kind,
            seq = (SELECT MAX(seq) + 1 FROM conversation_items)
          WHERE kind = 'deleted'`,
      ),
      findConversationItem: db.prepare(
        `SELECT item_json FROM conversation_items
        WHERE account_id = ? AND conversation_id = ? AND item_id = ? AND kind = 'item'`,
      ),
      deleteItem: db.prepare(
        `UPDATE conversation_items SET kind = 'deleted', item_json = '{}'
        WHERE account_id = ? AND conversation_id = ? AND item_id = ? AND kind = 'item'`,
      ),
    };
  }

  async findResponse(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredResponse | undefined> {
    const row = this.s.findResponse.get(accountId, id, now) as ResponseRow | undefined;
    return row ? responseFromRow(row) : undefined;
  }

  async responseChain(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredResponse[] | undefined> {
    const rows = (this.s.chain.all({ p1: id, p2: accountId, p3: now }) as ResponseRow[]).map(
      responseFromRow,
    );
    return rows.at(-1)?.id === id ? rows : undefined;
  }

  async deleteResponse(accountId: string, id: string, now: number): Promise<boolean> {
    return this.s.deleteResponse.run(accountId, id, now).changes > 0;
  }

  async findItems(accountId: string, ids: string[], now: number): Promise<StateItem[]> {
    const found: StateItem[] = [];
    for (const id of ids) {
      const row = this.s.findItem.get(accountId, id, now) as ResponseRow | undefined;
      const item = (row && itemIn(row, id)) ?? this.conversationItem(accountId, id, now);
      if (item) found.push(item);
    }
    return found;
  }

  async signedReasoningBefore(
    accountId: string,
    itemIds: string[],
    now: number,
  ): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    for (const id of itemIds) {
      for (const row of this.s.findSigned.all(accountId, id, now) as ResponseRow[]) {
        const signed = signedBefore(row, id);
        if (signed !== undefined) found.set(id, signed);
      }
    }
    return found;
  }

  /** An item of a live conversation of the account, by id. */
  private conversationItem(accountId: string, id: string, now: number): StateItem | undefined {
    const row = this.s.findHeldItem.get(accountId, id, now) as ItemRow | undefined;
    return row ? itemFromRow(row) : undefined;
  }

  async saveTurn(turn: StoredTurn): Promise<void> {
    const { accountId, response, conversation, now, expiresAt } = turn;
    this.immediate(() => {
      this.prune(now);
      if (response) {
        const previous = previousLink(response);
        if (response.nativeHolder !== null && response.nativeId !== null)
          this.s.releaseNative.run({ p1: response.nativeHolder, p2: response.nativeId });
        this.s.putResponse.run(
          accountId,
          response.id,
          previous,
          response.nativeHolder,
          response.nativeId,
          JSON.stringify(response.response),
          JSON.stringify(response.inputItems),
          response.signedReasoning,
          response.conversation?.id ?? null,
          response.conversation?.through ?? null,
          response.conversation?.count ?? null,
          response.createdAt,
          expiresAt,
        );
        for (const itemId of itemIdsOf(response))
          this.s.putResponseItem.run(accountId, itemId, response.id);
        if (previous) this.s.stretchChain.run({ p1: previous, p2: accountId, p3: expiresAt });
        if (turn.chainConversation)
          this.s.keepConversation.run(expiresAt, accountId, turn.chainConversation, now);
      }
      if (conversation)
        this.append(accountId, conversation.id, keptItems(conversation), now, expiresAt);
    });
  }

  async createConversation(
    conversation: StoredConversation,
    items: StateItem[],
    expiresAt: number,
  ): Promise<void> {
    const { accountId, id, createdAt } = conversation;
    this.immediate(() => {
      this.prune(createdAt);
      this.s.putConversation.run(
        accountId,
        id,
        JSON.stringify(conversation.metadata),
        createdAt,
        expiresAt,
      );
      for (const item of items) this.putItem(accountId, id, item, "item");
    });
  }

  async findConversation(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredConversation | undefined> {
    const row = this.s.findConversation.get(accountId, id, now) as ConversationRow | undefined;
    return row ? conversationFromRow(row) : undefined;
  }

  async updateConversation(
    accountId: string,
    id: string,
    metadata: Record<string, string>,
    now: number,
    expiresAt: number,
  ): Promise<StoredConversation | undefined> {
    const row = this.s.setMetadata.get(JSON.stringify(metadata), expiresAt, accountId, id, now) as
      | ConversationRow
      | undefined;
    return row ? conversationFromRow(row) : undefined;
  }

  async deleteConversation(accountId: string, id: string, now: number): Promise<boolean> {
    return this.s.deleteConversation.run(now, accountId, id, now).changes > 0;
  }

  async listItems(
    accountId: string,
    conversationId: string,
    now: number,
    page?: ItemPageQuery,
  ): Promise<ItemPage | undefined> {
    if (!this.s.findConversation.get(accountId, conversationId, now)) return undefined;
    return itemPage(this.s.items.all(accountId, conversationId) as ItemRow[], page);
  }

  async replayItems(
    accountId: string,
    conversationId: string,
    now: number,
  ): Promise<{ items: StateItem[]; through: number } | undefined> {
    if (!this.s.findConversation.get(accountId, conversationId, now)) return undefined;
    return replayedItems(this.s.items.all(accountId, conversationId) as ItemRow[]);
  }

  async conversationContext(
    accountId: string,
    conversationId: string,
    through: number,
    now: number,
  ): Promise<StateItem[]> {
    if (!this.s.findConversation.get(accountId, conversationId, now)) return [];
    return contextItems(this.s.items.all(accountId, conversationId) as ItemRow[], through);
  }

  async addItems(
    accountId: string,
    conversationId: string,
    items: StateItem[],
    now: number,
    expiresAt: number,
  ): Promise<StateItem[] | undefined> {
    return this.immediate(() =>
      this.append(
        accountId,
        conversationId,
        items.map((item) => ({ item, kind: "item" as const })),
        now,
        expiresAt,
      ),
    );
  }

  async findItem(
    accountId: string,
    conversationId: string,
    itemId: string,
    now: number,
  ): Promise<StateItem | undefined> {
    if (!this.s.findConversation.get(accountId, conversationId, now)) return undefined;
    const row = this.s.findConversationItem.get(accountId, conversationId, itemId) as
      | ItemRow
      | undefined;
    return row ? itemFromRow(row) : undefined;
  }

  async deleteItem(
    accountId: string,
    conversationId: string,
    itemId: string,
    now: number,
  ): Promise<StoredConversation | undefined> {
    return this.immediate(() => {
      const row = this.s.findConversation.get(accountId, conversationId, now) as
        | ConversationRow
        | undefined;
      if (!row) return undefined;
      if (this.s.deleteItem.run(accountId, conversationId, itemId).changes === 0) return undefined;
      return conversationFromRow(row);
    });
  }

  private append(
    accountId: string,
    conversationId: string,
    items: { item: StateItem; kind: ItemKind }[],
    now: number,
    expiresAt: number,
  ): StateItem[] | undefined {
    if (this.s.touchConversation.run(expiresAt, accountId, conversationId, now).changes === 0)
      return undefined;
    return items
      .filter(({ item, kind }) => this.putItem(accountId, conversationId, item, kind))
      .map(({ item }) => item);
  }

  private putItem(
    accountId: string,
    conversationId: string,
    item: StateItem,
    kind: ItemKind,
  ): boolean {
    const json = JSON.stringify(item);
    return this.s.putItem.run(accountId, conversationId, String(item.id), json, kind).changes > 0;
  }

  private prune(now: number): void {
    if (Math.abs(now - this.prunedAt) < PRUNE_EVERY_MS) return;
    this.prunedAt = now;
    this.s.pruneResponses.run(now);
    this.s.pruneResponseItems.run();
    this.s.pruneItems.run(now);
    this.s.pruneConversations.run(now);
  }
}
