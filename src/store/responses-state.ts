/**
 * What the Responses API remembers, for every wire: stored responses (what was answered, the
 * turn's own input items, the response it continued) and conversations with their items. Rows
 * belong to one account; another account's id is as unknown as a missing one. Every row expires
 * (`expiresAt` is given by the caller, from the gateway's clock and the configured lifetime).
 */

import type { PageQuery } from "./types.js";

export type StateItem = Record<string, unknown>;

export interface StoredResponse {
  id: string;
  accountId: string;
  previousResponseId: string | null;
  /**
   * Who holds it under its own id: the `responses_native` provider that served it and the key it
   * was served with (another key may be another project's, which does not hold it); null when
   * translated. Opaque: compared whole.
   */
  nativeHolder: string | null;
  /**
   * The id the native holder gave it (`id` is the gateway's own: a server may give an id again);
   * null when translated.
   */
  nativeId: string | null;
  /** The Response object as the client got it. */
  response: StateItem;
  /** The turn's own input, as items with ids (what `input_items` lists). */
  inputItems: StateItem[];
  /**
   * The signed reasoning the answer came with (a reasoning item's `encrypted_content`) where the
   * client was not shown it: a later turn of the chain sends it back. Null when there is none.
   */
  signedReasoning: string | null;
  /**
   * The conversation the turn was made on, how far into it the turn read (`through`, the place of
   * the last item it was sent) and how many items it was sent of it (`count`): a turn continued
   * from this response with `previous_response_id` is sent those items first, as this one was
   * (fewer once some were deleted). Null for a turn on none.
   */
  conversation: { id: string; through: number; count: number } | null;
  /** Epoch ms. */
  createdAt: number;
}

export interface StoredConversation {
  id: string;
  accountId: string;
  metadata: Record<string, string>;
  /** Epoch ms. */
  createdAt: number;
}

/** `after` is an item id. */
export type ItemPageQuery = PageQuery;

export interface ItemPage {
  items: StateItem[];
  hasMore: boolean;
  /** `after` names no item the conversation held (a deleted one still marks where it was). */
  afterUnknown: boolean;
}

/**
 * How a conversation keeps an item: one its client sees (`item`); the signed reasoning of an
 * answer its client was not shown (`signed`), which the next turns replay before that answer but
 * no listing shows; or where a deleted item was (`deleted`, its content gone), so that a page
 * after it goes on from there.
 */
export type ItemKind = "item" | "signed" | "deleted";

/** A response turn to keep: the response (absent with `store: false`) and its conversation's new items. */
export interface StoredTurn {
  accountId: string;
  response?: StoredResponse;
  /**
   * The conversation's new items, and the signed reasoning item kept before `items[signed.before]`
   * (the answer's first item) where the client was not shown it.
   */
  conversation?: { id: string; items: StateItem[]; signed?: { before: number; item: StateItem } };
  /**
   * The conversation the response's chain starts on (its first turn was made on it, and every
   * later turn is sent its items): it lives at least as long as the response, as the chain does.
   */
  chainConversation?: string;
  now: number;
  expiresAt: number;
}

/** A turn's conversation items as the conversation keeps them, the signed reasoning in its place. */
export function keptItems(
  conversation: NonNullable<StoredTurn["conversation"]>,
): { item: StateItem; kind: ItemKind }[] {
  const kept = conversation.items.map((item) => ({ item, kind: "item" as ItemKind }));
  const signed = conversation.signed;
  if (signed) kept.splice(signed.before, 0, { item: signed.item, kind: "signed" });
  return kept;
}

/** Expired rows are swept by a write at most this often: reads never see them anyway. */
export const PRUNE_EVERY_MS = 60_000;

/** A chain that would loop (an upstream that reuses ids) is cut here. */
export const MAX_CHAIN_LENGTH = 10_000;

export interface ResponsesStateRepository {
  findResponse(accountId: string, id: string, now: number): Promise<StoredResponse | undefined>;
  /**
   * The responses of the chain that ends in `id`, oldest first, following previous_response_id
   * while the rows are held; undefined when `id` itself is not held.
   */
  responseChain(accountId: string, id: string, now: number): Promise<StoredResponse[] | undefined>;
  deleteResponse(accountId: string, id: string, now: number): Promise<boolean>;
  /**
   * The signed reasoning kept with the account's live stored responses whose answer begins with
   * one of `itemIds`, by that item's id (`StoredResponse.signedReasoning`): what a turn that sends
   * such an answer back by its items' ids is sent ahead of it.
   */
  signedReasoningBefore(
    accountId: string,
    itemIds: string[],
    now: number,
  ): Promise<Map<string, string>>;
  /**
   * Items by id, in the order asked: of the account's live stored responses (their input or
   * output), else of its live conversations (an item added to one alone, or of a `store: false`
   * turn; not one deleted from it); an id none holds is left out. What an `item_reference` in a
   * later request stands for.
   */
  findItems(accountId: string, ids: string[], now: number): Promise<StateItem[]>;
  /**
   * Keeps a turn in one transaction: the response row (every response of its chain then lives
   * at least as long as it, so a chain is never replayed with a gap) and its items appended to
   * its conversation, whose expiry moves on. A native response's id now names it on its server:
   * every other response that server held under that id (of any account), and each continued from
   * one of them on that server, is no longer held there (`nativeHolder` null). Expired rows of
   * every account go.
   */
  saveTurn(turn: StoredTurn): Promise<void>;

  createConversation(
    conversation: StoredConversation,
    items: StateItem[],
    expiresAt: number,
  ): Promise<void>;
  findConversation(
    accountId: string,
    id: string,
    now: number,
  ): Promise<StoredConversation | undefined>;
  updateConversation(
    accountId: string,
    id: string,
    metadata: Record<string, string>,
    now: number,
    expiresAt: number,
  ): Promise<StoredConversation | undefined>;
  deleteConversation(accountId: string, id: string, now: number): Promise<boolean>;
  /** A page of the items the conversation's client sees; every one, oldest first, without `page`. */
  listItems(
    accountId: string,
    conversationId: string,
    now: number,
    page?: ItemPageQuery,
  ): Promise<ItemPage | undefined>;
  /**
   * What a turn on the conversation is sent before its own input, oldest first: its items and the
   * signed reasoning kept with them, and the place of the last one (`through`, for
   * `conversationContext`); undefined for an unknown conversation.
   */
  replayItems(
    accountId: string,
    conversationId: string,
    now: number,
  ): Promise<{ items: StateItem[]; through: number } | undefined>;
  /**
   * What a turn made on the conversation was sent of it (`replayItems` then, up to `through`),
   * less the items deleted since; none when the conversation is no longer held.
   */
  conversationContext(
    accountId: string,
    conversationId: string,
    through: number,
    now: number,
  ): Promise<StateItem[]>;
  /**
   * Appends items (each with its id) to a held conversation; an id the conversation already holds
   * is not added twice (a deleted item's is added anew, at the end). Returns the items added, or
   * undefined for an unknown conversation.
   */
  addItems(
    accountId: string,
    conversationId: string,
    items: StateItem[],
    now: number,
    expiresAt: number,
  ): Promise<StateItem[] | undefined>;
  findItem(
    accountId: string,
    conversationId: string,
    itemId: string,
    now: number,
  ): Promise<StateItem | undefined>;
  /**
   * Removes one item (its place kept for a page `after` it); the conversation, or undefined when
   * it or the item is not held.
   */
  deleteItem(
    accountId: string,
    conversationId: string,
    itemId: string,
    now: number,
  ): Promise<StoredConversation | undefined>;
}

export interface ResponseRow {
  account_id: string;
  id: string;
  previous_response_id: string | null;
  native_provider_id: string | null;
  native_id: string | null;
  response_json: string;
  input_items_json: string;
  signed_reasoning: string | null;
  conversation_id: string | null;
  conversation_seq: number | string | null;
  conversation_count: number | string | null;
  created_at: number | string;
}

export interface ConversationRow {
  account_id: string;
  id: string;
  metadata_json: string;
  created_at: number | string;
}

export function responseFromRow(row: ResponseRow): StoredResponse {
  return {
    id: row.id,
    accountId: row.account_id,
    previousResponseId: row.previous_response_id,
    nativeHolder: row.native_provider_id,
    nativeId: row.native_id,
    response: JSON.parse(row.response_json) as StateItem,
    inputItems: JSON.parse(row.input_items_json) as StateItem[],
    signedReasoning: row.signed_reasoning,
    conversation:
      row.conversation_id === null
        ? null
        : {
            id: row.conversation_id,
            through: Number(row.conversation_seq ?? 0),
            count: Number(row.conversation_count ?? 0),
          },
    createdAt: Number(row.created_at),
  };
}

export function conversationFromRow(row: ConversationRow): StoredConversation {
  return {
    id: row.id,
    accountId: row.account_id,
    metadata: JSON.parse(row.metadata_json) as Record<string, string>,
    createdAt: Number(row.created_at),
  };
}

/** A stored response's items: its turn's input, then its output. */
export function itemsOf(response: Pick<StoredResponse, "inputItems" | "response">): StateItem[] {
  const output = response.response.output;
  const out = Array.isArray(output)
    ? output.filter((item): item is StateItem => typeof item === "object" && item !== null)
    : [];
  return [...response.inputItems, ...out];
}

/** The distinct ids of a response's items, for the index `findItems` reads. */
export function itemIdsOf(response: StoredResponse): string[] {
  const ids = new Set<string>();
  for (const item of itemsOf(response)) if (typeof item.id === "string") ids.add(item.id);
  return [...ids];
}

/** The item `id` of a response row found by the index. */
export function itemIn(row: ResponseRow, id: string): StateItem | undefined {
  return itemsOf(responseFromRow(row)).find((item) => item.id === id);
}

/**
 * The signed reasoning a response row kept where its answer begins with the item `id`: the
 * thinking the model did before it, which its client was not shown.
 */
export function signedBefore(row: ResponseRow, id: string): string | undefined {
  if (row.signed_reasoning === null) return undefined;
  const output = (JSON.parse(row.response_json) as StateItem).output;
  const first: unknown = Array.isArray(output) ? output[0] : undefined;
  return typeof first === "object" && first !== null && (first as StateItem).id === id
    ? row.signed_reasoning
    : undefined;
}

/** The id a response row links back to; a response naming itself (a reused id) links nowhere. */
export function previousLink(response: StoredResponse): string | null {
  const previous = response.previousResponseId;
  return previous && previous !== response.id ? previous : null;
}

/**
 * The page of `rows` (oldest first) that `page` asks for, `after` naming a row by `idOf`; only
 * rows `shown` are on it (the others only mark a place). Undefined when `after` names no row.
 */
export function pageOf<T>(
  rows: T[],
  page: ItemPageQuery,
  idOf: (row: T) => string,
  shown: (row: T) => boolean = () => true,
): { rows: T[]; hasMore: boolean } | undefined {
  const ordered = page.order === "asc" ? rows : [...rows].reverse();
  let start = 0;
  if (page.after !== undefined) {
    const at = ordered.findIndex((row) => idOf(row) === page.after);
    if (at < 0) return undefined;
    start = at + 1;
  }
  const rest = ordered.slice(start).filter(shown);
  return { rows: rest.slice(0, page.limit), hasMore: rest.length > page.limit };
}

/** A conversation's item as both backends keep it; `seq` is its place, which only grows. */
export interface ItemRow {
  item_id: string;
  item_json: string;
  kind: ItemKind;
  seq: number | string;
}

export function itemFromRow(row: Pick<ItemRow, "item_json">): StateItem {
  return JSON.parse(row.item_json) as StateItem;
}

/**
 * The items a client sees of a conversation's rows (oldest first, every kind) that `page` asks
 * for, every one without it; only the page's items are parsed.
 */
export function itemPage(rows: ItemRow[], page: ItemPageQuery | undefined): ItemPage {
  const shown = (row: ItemRow) => row.kind === "item";
  const chosen = page
    ? pageOf(rows, page, (row) => row.item_id, shown)
    : { rows: rows.filter(shown), hasMore: false };
  return {
    items: chosen?.rows.map(itemFromRow) ?? [],
    hasMore: chosen?.hasMore ?? false,
    afterUnknown: chosen === undefined,
  };
}

/**
 * What a turn replays of a conversation's rows (oldest first): every item but the deleted, and the
 * place of the last row (0 for none).
 */
export function replayedItems(rows: ItemRow[]): { items: StateItem[]; through: number } {
  const through = rows.reduce((last, row) => Math.max(last, Number(row.seq)), 0);
  return { items: rows.filter((row) => row.kind !== "deleted").map(itemFromRow), through };
}

/** What a turn that read a conversation's rows up to `through` was sent, less the deleted since. */
export function contextItems(rows: ItemRow[], through: number): StateItem[] {
  return replayedItems(rows.filter((row) => Number(row.seq) <= through)).items;
}

// CROSS JOIN: SQLite walks the chain's few ids and looks each one up, rather than the account's
// every row (Postgres plans it as any join).
const chainSql = (p: (n: number) => string) => `
  WITH RECURSIVE chain(id, depth) AS (
    SELECT CAST(${p(1)} AS TEXT), 0
    UNION ALL
    SELECT r.previous_response_id, c.depth + 1 FROM stored_responses r JOIN chain c ON r.id = c.id
    WHERE r.account_id = ${p(2)} AND r.previous_response_id IS NOT NULL AND c.depth < ${MAX_CHAIN_LENGTH}
  )
  SELECT r.* FROM chain c CROSS JOIN stored_responses r
  WHERE r.account_id = ${p(2)} AND r.id = c.id AND r.expires_at > ${p(3)}
  ORDER BY c.depth DESC`;

/** Every response of the chain ending in $1 lives at least until $3. */
const stretchChainSql = (p: (n: number) => string, max: string) => `
  WITH RECURSIVE chain(id) AS (
    SELECT CAST(${p(1)} AS TEXT)
    UNION
    SELECT r.previous_response_id FROM stored_responses r JOIN chain c ON r.id = c.id
    WHERE r.account_id = ${p(2)} AND r.previous_response_id IS NOT NULL
  )
  UPDATE stored_responses SET expires_at = ${max}(expires_at, ${p(3)})
  WHERE account_id = ${p(2)} AND id IN (SELECT id FROM chain)`;

/**
 * The native server $1 (a provider and key) gave its id $2 to a new response: every response it
 * held under that id, of any account, and each continued from one of them on that server (whose
 * chain there runs through it), is held there no more. A later turn is sent the chain whole.
 */
const releaseNativeSql = (p: (n: number) => string) => `
  WITH RECURSIVE taken(account_id, id) AS (
    SELECT account_id, id FROM stored_responses
    WHERE native_provider_id = ${p(1)} AND native_id = ${p(2)}
    UNION
    SELECT r.account_id, r.id FROM stored_responses r JOIN taken t
      ON r.account_id = t.account_id AND r.previous_response_id = t.id
    WHERE r.native_provider_id = ${p(1)}
  )
  UPDATE stored_responses SET native_provider_id = NULL
  WHERE (account_id, id) IN (SELECT account_id, id FROM taken)`;

/** The SQL both backends run, with their placeholders. */
export const stateSql = {
  chain: chainSql,
  stretchChain: stretchChainSql,
  releaseNative: releaseNativeSql,
};
