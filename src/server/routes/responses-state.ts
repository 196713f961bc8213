import type { Context } from "hono";
import { type ItemPageQuery, pageOf, type StateItem } from "../../store/responses-state.js";
import type { Services } from "../compose/services.js";
import { badRequest, GatewayError } from "../errors.js";
import type { AppEnv, Handler } from "../http/context.js";
import { includable } from "../wire/translate/responses.js";
import { listPage, listQuery } from "./list-page.js";

/**
 * GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: the responses the
 * gateway stored (`store` defaults to true), whichever wire served them, for their own account
 * only (another account's id is as unknown as a missing one).
 */
export function responseHandlers(services: Pick<Services, "repos" | "options">) {
  const repo = services.repos.responsesState;
  const find = async (c: Context<AppEnv>) => {
    const id = c.req.param("id") ?? "";
    const held = await repo.findResponse(c.get("auth").key.account_id, id, services.options.now());
    if (!held) throw responseNotFound(id);
    return held;
  };
  const retrieve: Handler = async (c) => {
    // The SDK's retrieve(id, { stream: true }) parses whatever comes back as SSE: a JSON body
    // would reach it as a stream with no events. Every response here finished before it was
    // stored (`background` included), so there is no stream left to resume.
    if (c.req.query("stream") === "true")
      throw badRequest(
        "`stream` is not available on GET /v1/responses/{id}: every response is complete once stored, so there is no stream to resume. GET it without `stream` to read it whole.",
      );
    return c.json((await find(c)).response);
  };
  const remove: Handler = async (c) => {
    const id = c.req.param("id") ?? "";
    const account = c.get("auth").key.account_id;
    if (!(await repo.deleteResponse(account, id, services.options.now())))
      throw responseNotFound(id);
    return c.json({ id, object: "response", deleted: true });
  };
  const inputItems: Handler = async (c) => {
    const page = pageQuery(c);
    const include = includeQuery(c);
    const held = await find(c);
    const chosen = pageOf(held.inputItems, page, (item) => String(item.id));
    if (!chosen) throw unknownAfter(page, `response '${held.id}'`);
    return c.json(itemList(chosen.rows, chosen.hasMore, include));
  };
  // Nothing runs in the background here: a response is stored once it is complete.
  const cancel: Handler = async (c) => {
    const { id } = await find(c);
    throw badRequest(
      `Response '${id}' is already complete: the gateway answers every response (\`background\` ones too) before it returns, so there is nothing to cancel.`,
    );
  };
  return { retrieve, remove, inputItems, cancel };
}

/**
 * POST /v1/responses/compact: its answer is a compaction item encrypted by OpenAI, which only
 * OpenAI's API can read back, so no backend of the gateway could use it on the next turn.
 */
export const compactRefused: Handler = () => {
  throw badRequest(
    "POST /v1/responses/compact is not available: a compacted conversation is an item only OpenAI's API can read. Continue the conversation with `previous_response_id` or `conversation`, or send a shorter `input`.",
  );
};

export function responseNotFound(id: string): GatewayError {
  return new GatewayError(404, "not_found", `Response with id '${id}' not found.`);
}

/** `limit` (1-100, default 20), `order` (default desc) and `after` (an item id), as OpenAI pages lists. */
export const pageQuery: (c: Context<AppEnv>) => ItemPageQuery = listQuery(100, 20).parse;

/**
 * A page `after` an id the list never held: a 400 naming `after`, as the job listings answer, not
 * an empty page that would read as the end of the list.
 */
export function unknownAfter(page: ItemPageQuery, holder: string): GatewayError {
  return badRequest(
    `Invalid query parameter after: no item '${page.after}' exists in ${holder}. \`after\` takes the id of an item listed before (\`last_id\`).`,
  );
}

/**
 * The `include` of a route that shows items: each value one a Responses request may include (a
 * 400 naming `include` otherwise, as OpenAI answers), sent as the SDKs send an array
 * (`include[]=...`) or repeated (`include=...`).
 */
export function includeQuery(c: Context<AppEnv>): ReadonlySet<string> {
  const values = [...(c.req.queries("include[]") ?? []), ...(c.req.queries("include") ?? [])];
  const unknown = values.find((value) => !includable.includes(value));
  if (unknown !== undefined)
    throw badRequest(
      `Invalid query parameter include: '${unknown}' is not a supported value. Supported values are: ${includable.map((value) => `'${value}'`).join(", ")}.`,
    );
  return new Set(values);
}

/**
 * An item as OpenAI shows it: a reasoning item's `encrypted_content` only where the request
 * includes `reasoning.encrypted_content`, whoever asked for it when the item was kept.
 */
export function shownItem(item: StateItem, include: ReadonlySet<string>): StateItem {
  if (item.type !== "reasoning" || !("encrypted_content" in item)) return item;
  if (include.has("reasoning.encrypted_content")) return item;
  const { encrypted_content: _hidden, ...shown } = item;
  return shown;
}

/** A page of items as OpenAI lists them, each as `include` shows it. */
export function itemList(items: StateItem[], hasMore: boolean, include: ReadonlySet<string>) {
  const shown = items.map((item) => shownItem(item, include));
  return listPage(shown, (item) => String(item.id), hasMore);
}
