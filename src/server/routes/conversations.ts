import type { Context } from "hono";
import { z } from "zod";
import type { StoredConversation } from "../../store/responses-state.js";
import type { Services } from "../compose/services.js";
import { conversationItems } from "../dispatch/response-state.js";
import { GatewayError } from "../errors.js";
import { readJson, readOptionalJson } from "../http/body.js";
import type { AppEnv, Handler } from "../http/context.js";
import { randomId } from "../wire/translate/shared.js";
import { responsesInputItem } from "./completions.js";
import { includeQuery, itemList, pageQuery, shownItem, unknownAfter } from "./responses-state.js";

/**
 * /v1/conversations: OpenAI's Conversations API (create, retrieve, update, delete; items list,
 * add, retrieve, delete), kept per account in the same store as responses and expiring like
 * them, counted from a conversation's last change. `POST /v1/responses` with `conversation`
 * reads its items before the turn and appends the turn's input and output to it.
 */

/** OpenAI's metadata: at most 16 pairs, keys up to 64 characters, values up to 512. */
const metadata = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, "at most 16 keys");

/** Items added at once, as OpenAI bounds them; each a Responses input item. */
const maxItemsPerCall = 20;
const items = z.array(responsesInputItem).max(maxItemsPerCall);

const createBody = z.looseObject({ items: items.nullish(), metadata: metadata.nullish() });
const updateBody = z.looseObject({ metadata: metadata.nullable() });
const addItemsBody = z.looseObject({ items: items.min(1) });

export function conversationHandlers(services: Pick<Services, "repos" | "options">) {
  const repo = services.repos.responsesState;
  const now = () => services.options.now();
  const expiresAt = (at: number) => at + services.options.responsesTtlMs;
  const account = (c: Context<AppEnv>) => c.get("auth").key.account_id;
  // An `item_reference` is kept as the item it names.
  const itemsOf = (c: Context<AppEnv>, raw: z.infer<typeof items>) =>
    conversationItems({ repo, accountId: account(c), now }, raw);
  const conversationId = (c: Context<AppEnv>) => c.req.param("id") ?? "";

  const create: Handler = async (c) => {
    const body = await readOptionalJson(c, createBody);
    const kept = await itemsOf(c, body.items ?? []);
    const at = now();
    const conversation: StoredConversation = {
      id: randomId("conv_"),
      accountId: account(c),
      metadata: body.metadata ?? {},
      createdAt: at,
    };
    await repo.createConversation(conversation, kept, expiresAt(at));
    return c.json(conversationView(conversation));
  };

  const retrieve: Handler = async (c) => {
    const id = conversationId(c);
    const held = await repo.findConversation(account(c), id, now());
    if (!held) throw conversationNotFound(id);
    return c.json(conversationView(held));
  };

  const update: Handler = async (c) => {
    const id = conversationId(c);
    const body = await readJson(c, updateBody);
    const at = now();
    const held = await repo.updateConversation(
      account(c),
      id,
      body.metadata ?? {},
      at,
      expiresAt(at),
    );
    if (!held) throw conversationNotFound(id);
    return c.json(conversationView(held));
  };

  const remove: Handler = async (c) => {
    const id = conversationId(c);
    if (!(await repo.deleteConversation(account(c), id, now()))) throw conversationNotFound(id);
    return c.json({ id, object: "conversation.deleted", deleted: true });
  };

  const listItems: Handler = async (c) => {
    const id = conversationId(c);
    const query = pageQuery(c);
    const include = includeQuery(c);
    const page = await repo.listItems(account(c), id, now(), query);
    if (!page) throw conversationNotFound(id);
    if (page.afterUnknown) throw unknownAfter(query, `conversation '${id}'`);
    return c.json(itemList(page.items, page.hasMore, include));
  };

  const addItems: Handler = async (c) => {
    const id = conversationId(c);
    const include = includeQuery(c);
    const body = await readJson(c, addItemsBody);
    const kept = await itemsOf(c, body.items);
    const at = now();
    const added = await repo.addItems(account(c), id, kept, at, expiresAt(at));
    if (!added) throw conversationNotFound(id);
    return c.json(itemList(added, false, include));
  };

  const retrieveItem: Handler = async (c) => {
    const id = conversationId(c);
    const itemId = c.req.param("itemId") ?? "";
    const include = includeQuery(c);
    const item = await repo.findItem(account(c), id, itemId, now());
    if (!item) throw itemNotFound(id, itemId);
    return c.json(shownItem(item, include));
  };

  const removeItem: Handler = async (c) => {
    const id = conversationId(c);
    const itemId = c.req.param("itemId") ?? "";
    const held = await repo.deleteItem(account(c), id, itemId, now());
    if (!held) throw itemNotFound(id, itemId);
    return c.json(conversationView(held));
  };

  return { create, retrieve, update, remove, listItems, addItems, retrieveItem, removeItem };
}

/** A conversation as OpenAI shows it (`created_at` in seconds). */
function conversationView(conversation: StoredConversation) {
  return {
    id: conversation.id,
    object: "conversation" as const,
    created_at: Math.floor(conversation.createdAt / 1000),
    metadata: conversation.metadata,
  };
}

function conversationNotFound(id: string): GatewayError {
  return new GatewayError(404, "not_found", `Conversation with id '${id}' not found.`);
}

function itemNotFound(conversationId: string, itemId: string): GatewayError {
  return new GatewayError(
    404,
    "not_found",
    `Item with id '${itemId}' not found in conversation '${conversationId}'.`,
  );
}
