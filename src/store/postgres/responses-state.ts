import type pg from "pg";
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
import { inTransaction, lockFor, type Queryable } from "./transaction.js";

type Row = ResponseRow;

const pgParam = (n: number) => `$${n}`;

/** Responses API state and conversations on Postgres (see ResponsesStateRepository). */
export class PostgresResponsesState implements ResponsesStateRepository {
  private prunedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly pool: pg.Pool) {}

  /** Sweeps expired rows from this transaction, at most every PRUNE_EVERY_MS of this gateway's. */
  private pruneDue(now: number): boolean {
    return Math.abs(now - this.prunedAt) >= PRUNE_EVERY_MS;
  }

  private async prune(client: pg.PoolClient, now: number): Promise<void> {
    if (!this.pruneDue(now)) return;
    this.prunedAt = now;
    await prune(client, now);
  }

  async findResponse(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredResponse | undefined> {
    const result = await this.pool.query<Row>({
      name: "responses_find",
      text: "SELECT * FROM stored_responses WHERE account_id = $1 AND id = $2 AND expires_at > $3",
      values: [accountId, id, now],
    });
    const row = result.rows[0];
    return row ? responseFromRow(row) : undefined;
  }

  async responseChain(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredResponse[] | undefined> {
    const result = await this.pool.query<Row>({
      name: "responses_chain",
      text: stateSql.chain(pgParam),
      values: [id, accountId, now],
    });
    const rows = result.rows.map(responseFromRow);
    return rows.at(-1)?.id === id ? rows : undefined;
  }

  async deleteResponse(accountId: string, id: string, now: number): Promise<boolean> {
    const result = await this.pool.query({
      name: "responses_delete",
      text: "DELETE FROM stored_responses WHERE account_id = $1 AND id = $2 AND expires_at > $3",
      values: [accountId, id, now],
    });
    return (result.rowCount ?? 0) > 0;
  }

  async findItems(accountId: string, ids: string[], now: number): Promise<StateItem[]> {
    if (ids.length === 0) return [];
    const result = await this.pool.query<Row & { item_id: string }>({
      name: "response_items_find",
      text: `SELECT i.item_id, r.* FROM response_items i JOIN stored_responses r
          ON r.account_id = i.account_id AND r.id = i.response_id
        WHERE i.account_id = $1 AND i.item_id = ANY($2::text[]) AND r.expires_at > $3
        ORDER BY r.created_at DESC`,
      values: [accountId, ids, now],
    });
    const found = new Map<string, StateItem>();
    for (const id of ids) {
      const row = result.rows.find((r) => r.item_id === id);
      const item = row ? itemIn(row, id) : undefined;
      if (item) found.set(id, item);
    }
    const rest = ids.filter((id) => !found.has(id));
    if (rest.length > 0) {
      // Items only a conversation holds: the one added last, if conversations share an id.
      const held = await this.pool.query<Pick<ItemRow, "item_id" | "item_json">>({
        name: "conversation_items_find_by_id",
        text: `SELECT DISTINCT ON (i.item_id) i.item_id, i.item_json FROM conversation_items i
            JOIN conversations c ON c.account_id = i.account_id AND c.id = i.conversation_id
          WHERE i.account_id = $1 AND i.item_id = ANY($2::text[]) AND i.kind = 'item'
            AND c.expires_at > $3
          ORDER BY i.item_id, i.seq DESC`,
        values: [accountId, rest, now],
      });
      for (const row of held.rows) found.set(row.item_id, itemFromRow(row));
    }
    return ids.flatMap((id) => {
      const item = found.get(id);
      return item ? [item] : [];
    });
  }

  async signedReasoningBefore(
    accountId: string,
    itemIds: string[],
    now: number,
  ): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    if (itemIds.length === 0) return found;
    const result = await this.pool.query<Row & { item_id: string }>({
      name: "responses_signed_before",
      text: `SELECT i.item_id, r.* FROM response_items i JOIN stored_responses r
          ON r.account_id = i.account_id AND r.id = i.response_id
        WHERE i.account_id = $1 AND i.item_id = ANY($2::text[]) AND r.expires_at > $3
          AND r.signed_reasoning IS NOT NULL`,
      values: [accountId, itemIds, now],
    });
    for (const row of result.rows) {
      const signed = signedBefore(row, row.item_id);
      if (signed !== undefined) found.set(row.item_id, signed);
    }
    return found;
  }

  async saveTurn(turn: StoredTurn): Promise<void> {
    const { accountId, response, conversation, now, expiresAt } = turn;
    const previous = response ? previousLink(response) : null;
    // A native response may take its id from others on its server (releaseNative).
    const native = response?.nativeHolder != null && response.nativeId !== null;
    // A first turn is one statement: no transaction round trips around it.
    const single = !previous && !native && !conversation && !turn.chainConversation;
    if (response && single && !this.pruneDue(now)) {
      await putResponse(this.pool, accountId, response, null, expiresAt);
      return;
    }
    await inTransaction(this.pool, async (client) => {
      await this.prune(client, now);
      if (response) {
        if (native) {
          // Two gateways keeping responses a server gave one id must not each miss the other's.
          await lockFor(
            client,
            "nativeResponseId",
            `${response.nativeHolder} ${response.nativeId}`,
          );
          await client.query({
            name: "responses_release_native",
            text: stateSql.releaseNative(pgParam),
            values: [response.nativeHolder, response.nativeId],
          });
        }
        await putResponse(client, accountId, response, previous, expiresAt);
        if (previous) {
          await client.query({
            name: "responses_stretch_chain",
            text: stateSql.stretchChain(pgParam, "GREATEST"),
            values: [previous, accountId, expiresAt],
          });
        }
        if (turn.chainConversation) {
          await client.query({
            name: "conversations_keep",
            text: `UPDATE conversations SET expires_at = GREATEST(expires_at, $1)
              WHERE account_id = $2 AND id = $3 AND expires_at > $4 AND deleted_at IS NULL`,
            values: [expiresAt, accountId, turn.chainConversation, now],
          });
        }
      }
      if (conversation)
        await append(client, accountId, conversation.id, keptItems(conversation), now, expiresAt);
    });
  }

  async createConversation(
    conversation: StoredConversation,
    items: StateItem[],
    expiresAt: number,
  ): Promise<void> {
    const { accountId, id, createdAt } = conversation;
    await inTransaction(this.pool, async (client) => {
      await this.prune(client, createdAt);
      await client.query({
        name: "conversations_put",
        text: `INSERT INTO conversations (account_id, id, metadata_json, created_at, expires_at)
          VALUES ($1, $2, $3, $4, $5)`,
        values: [accountId, id, JSON.stringify(conversation.metadata), createdAt, expiresAt],
      });
      for (const item of items) await putItem(client, accountId, id, item, "item");
    });
  }

  async findConversation(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredConversation | undefined> {
    const row = await findConversation(this.pool, accountId, id, now);
    return row ? conversationFromRow(row) : undefined;
  }

  async updateConversation(
    accountId: string,
    id: string,
    metadata: Record<string, string>,
    now: number,
    expiresAt: number,
  ): Promise<StoredConversation | undefined> {
    const result = await this.pool.query<ConversationRow>({
      name: "conversations_set_metadata",
      text: `UPDATE conversations SET metadata_json = $1, expires_at = $2
        WHERE account_id = $3 AND id = $4 AND expires_at > $5 AND deleted_at IS NULL RETURNING *`,
      values: [JSON.stringify(metadata), expiresAt, accountId, id, now],
    });
    const row = result.rows[0];
    return row ? conversationFromRow(row) : undefined;
  }

  // Its items stay, for an `item_reference` to them (as OpenAI keeps them), until it expires.
  async deleteConversation(accountId: string, id: string, now: number): Promise<boolean> {
    const deleted = await this.pool.query({
      name: "conversations_delete",
      text: `UPDATE conversations SET deleted_at = $3
        WHERE account_id = $1 AND id = $2 AND expires_at > $3 AND deleted_at IS NULL`,
      values: [accountId, id, now],
    });
    return (deleted.rowCount ?? 0) > 0;
  }

  async listItems(
    accountId: string,
    conversationId: string,
    now: number,
    page?: ItemPageQuery,
  ): Promise<ItemPage | undefined> {
    const rows = await this.itemRows(accountId, conversationId, now);
    return rows && itemPage(rows, page);
  }

  async replayItems(
    accountId: string,
    conversationId: string,
    now: number,
  ): Promise<{ items: StateItem[]; through: number } | undefined> {
    const rows = await this.itemRows(accountId, conversationId, now);
    return rows && replayedItems(rows);
  }

  async conversationContext(
    accountId: string,
    conversationId: string,
    through: number,
    now: number,
  ): Promise<StateItem[]> {
    const rows = await this.itemRows(accountId, conversationId, now);
    return rows ? contextItems(rows, through) : [];
  }

  /** Every row of a held conversation, oldest first. */
  private async itemRows(
    accountId: string,
    conversationId: string,
    now: number,
  ): Promise<ItemRow[] | undefined> {
    if (!(await findConversation(this.pool, accountId, conversationId, now))) return undefined;
    const result = await this.pool.query<ItemRow>({
      name: "conversation_items_list",
      text: `SELECT item_id, item_json, kind, seq FROM conversation_items
        WHERE account_id = $1 AND conversation_id = $2 ORDER BY seq`,
      values: [accountId, conversationId],
    });
    return result.rows;
  }

  async addItems(
    accountId: string,
    conversationId: string,
    items: StateItem[],
    now: number,
    expiresAt: number,
  ): Promise<StateItem[] | undefined> {
    const kept = items.map((item) => ({ item, kind: "item" as const }));
    return inTransaction(this.pool, (client) =>
      append(client, accountId, conversationId, kept, now, expiresAt),
    );
  }

  async findItem(
    accountId: string,
    conversationId: string,
    itemId: string,
    now: number,
  ): Promise<StateItem | undefined> {
    const result = await this.pool.query<ItemRow>({
      name: "conversation_items_find",
      text: `SELECT i.item_json FROM conversation_items i JOIN conversations c
          ON c.account_id = i.account_id AND c.id = i.conversation_id
        WHERE i.account_id = $1 AND i.conversation_id = $2 AND i.item_id = $3
          AND i.kind = 'item' AND c.expires_at > $4 AND c.deleted_at IS NULL`,
      values: [accountId, conversationId, itemId, now],
    });
    const row = result.rows[0];
    return row ? itemFromRow(row) : undefined;
  }

  async deleteItem(
    accountId: string,
    conversationId: string,
    itemId: string,
    now: number,
  ): Promise<StoredConversation | undefined> {
    return inTransaction(this.pool, async (client) => {
      const row = await findConversation(client, accountId, conversationId, now);
      if (!row) return undefined;
      const deleted = await client.query({
        name: "conversation_items_delete",
        text: `UPDATE conversation_items SET kind = 'deleted', item_json = '{}'
          WHERE account_id = $1 AND conversation_id = $2 AND item_id = $3 AND kind = 'item'`,
        values: [accountId, conversationId, itemId],
      });
      return (deleted.rowCount ?? 0) > 0 ? conversationFromRow(row) : undefined;
    });
  }
}

async function putResponse(
  db: Queryable,
  accountId: string,
  response: StoredResponse,
  previous: string | null,
  expiresAt: number,
): Promise<void> {
  // One statement: the row and its items' index entries.
  await db.query({
    name: "responses_put",
    text: `WITH put AS (
        INSERT INTO stored_responses (account_id, id, previous_response_id,
          native_provider_id, native_id, response_json, input_items_json, signed_reasoning,
          conversation_id, conversation_seq, conversation_count, created_at, expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
        ON CONFLICT (account_id, id) DO UPDATE SET
          previous_response_id = excluded.previous_response_id,
          native_provider_id = excluded.native_provider_id,
          native_id = excluded.native_id,
          response_json = excluded.response_json,
          input_items_json = excluded.input_items_json,
          signed_reasoning = excluded.signed_reasoning,
          conversation_id = excluded.conversation_id,
          conversation_seq = excluded.conversation_seq,
          conversation_count = excluded.conversation_count,
          created_at = excluded.created_at, expires_at = excluded.expires_at
      )
      INSERT INTO response_items (account_id, item_id, response_id)
      SELECT $1, item_id, $2 FROM unnest($14::text[]) AS item_id
      ON CONFLICT DO NOTHING`,
    values: [
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
      itemIdsOf(response),
    ],
  });
}

async function findConversation(
  db: Queryable,
  accountId: string,
  id: string,
  now: number,
): Promise<ConversationRow | undefined> {
  const result = await db.query<ConversationRow>({
    name: "conversations_find",
    text: `SELECT * FROM conversations
      WHERE account_id = $1 AND id = $2 AND expires_at > $3 AND deleted_at IS NULL`,
    values: [accountId, id, now],
  });
  return result.rows[0];
}

/** An item added; one whose id a deleted item had is added anew, at the end. */
async function putItem(
  client: pg.PoolClient,
  accountId: string,
  conversationId: string,
  item: StateItem,
  kind: ItemKind,
): Promise<boolean> {
  const result = await client.query({
    name: "conversation_items_put",
    text: `INSERT INTO conversation_items AS i
        (account_id, conversation_id, item_id, item_json, kind)
      VALUES ($1, $2, $3, $4, $5)
      ON CONFLICT (account_id, conversation_id, item_id) DO UPDATE
        SET item_json = excluded.item_json, kind = excluded.kind, seq = DEFAULT
        WHERE i.kind = 'deleted'`,
    values: [accountId, conversationId, String(item.id), JSON.stringify(item), kind],
  });
  return (result.rowCount ?? 0) > 0;
}

async function append(
  client: pg.PoolClient,
  accountId: string,
  conversationId: string,
  items: { item: StateItem; kind: ItemKind }[],
  now: number,
  expiresAt: number,
): Promise<StateItem[] | undefined> {
  const touched = await client.query({
    name: "conversations_touch",
    text: `UPDATE conversations SET expires_at = $1
      WHERE account_id = $2 AND id = $3 AND expires_at > $4 AND deleted_at IS NULL`,
    values: [expiresAt, accountId, conversationId, now],
  });
  if ((touched.rowCount ?? 0) === 0) return undefined;
  const added: StateItem[] = [];
  for (const { item, kind } of items)
    if (await putItem(client, accountId, conversationId, item, kind)) added.push(item);
  return added;
}

async function prune(client: pg.PoolClient, now: number): Promise<void> {
  await client.query({
    name: "responses_prune",
    text: "DELETE FROM stored_responses WHERE expires_at <= $1",
    values: [now],
  });
  await client.query({
    name: "response_items_prune",
    text: `DELETE FROM response_items i WHERE NOT EXISTS (SELECT 1 FROM stored_responses r
      WHERE r.account_id = i.account_id AND r.id = i.response_id)`,
  });
  await client.query({
    name: "conversation_items_prune",
    text: `DELETE FROM conversation_items WHERE (account_id, conversation_id) IN
      (SELECT account_id, id FROM conversations WHERE expires_at <= $1)`,
    values: [now],
  });
  await client.query({
    name: "conversations_prune",
    text: "DELETE FROM conversations WHERE expires_at <= $1",
    values: [now],
  });
}
