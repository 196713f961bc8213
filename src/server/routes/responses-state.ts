import type { Context } from "hono";
import {
  type ItemPageQuery,
  pageOf,
  type StateItem,
  type StoredResponse,
} from "../../store/responses-state.js";
import type { Services } from "../compose/services.js";
import { badRequest, GatewayError } from "../errors.js";
import type { AppEnv, Handler } from "../http/context.js";
import { sseHeaders } from "../http/sse-response.js";
import type { ReasoningDetail } from "../wire/openai-types.js";
import { decodeReasoning, encodeReasoning } from "../wire/translate/encrypted-reasoning.js";
import { encodeResponsesEvents } from "../wire/translate/errors.js";
import { includable } from "../wire/translate/responses.js";
import { replayedEvents } from "../wire/translate/responses-replay.js";
import { isRecord } from "../wire/translate/shared.js";
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
    const include = includeQuery(c);
    const stream = c.req.query("stream") === "true";
    const after = stream ? startingAfter(c) : -1;
    const response = shownResponse(await find(c), include);
    if (!stream) return c.json(response);
    // The SDK's retrieve(id, { stream: true }) and responses.stream({ response_id }) read the
    // answer as the events of its stream. Every response here finished before it was stored
    // (`background` ones too), so its events are replayed whole, from after `starting_after`.
    const events = replayedEvents(response).filter((ev) => ev.data.sequence_number > after);
    return c.body(encodeResponsesEvents(events), 200, sseHeaders);
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
 * `starting_after` of a replayed stream: the `sequence_number` of the last event the client has
 * (the replay sends those after it); -1, every event, when it is left out.
 */
function startingAfter(c: Context<AppEnv>): number {
  const raw = c.req.query("starting_after");
  if (raw === undefined) return -1;
  if (!/^\d{1,15}$/.test(raw))
    throw badRequest(
      `Invalid query parameter starting_after: '${raw}' is not a whole number. \`starting_after\` takes the \`sequence_number\` of the last event read.`,
    );
  return Number(raw);
}

/**
 * A stored response as the create answered it with this `include`: its output items each as
 * `shownItem` shows them; the signed reasoning kept where the create did not include it is given
 * with `reasoning.encrypted_content` where a create that included it has it: what the model thought
 * first in the answer's first reasoning item (or one ahead of the answer), what it thought after a
 * call (interleaved thinking) in the reasoning item after that call (or one put there).
 */
export function shownResponse(held: StoredResponse, include: ReadonlySet<string>): StateItem {
  const output = Array.isArray(held.response.output) ? held.response.output : [];
  const shown = output.map((item: unknown) => (isRecord(item) ? shownItem(item, include) : item));
  const signed = held.signedReasoning;
  const carried = shown.some(
    (item) => isRecord(item) && typeof item.encrypted_content === "string",
  );
  if (signed === null || !include.has("reasoning.encrypted_content") || carried)
    return { ...held.response, output: shown };
  const base = held.id.replace(/^resp_/, "");
  const calls = new Set(shown.map((item) => (isRecord(item) ? item.call_id : undefined)));
  const ahead: ReasoningDetail[] = [];
  const after = new Map<unknown, ReasoningDetail[]>();
  for (const detail of decodeReasoning(signed)) {
    const call = detail.after_tool_call_id;
    if (call === undefined || !calls.has(call)) ahead.push(detail);
    else after.set(call, [...(after.get(call) ?? []), detail]);
  }
  // Each group in the reasoning item the create listed there, or in one put where it would be.
  const placed: unknown[] = [];
  let rest = shown;
  const aheadSigned = encodeReasoning(ahead);
  if (aheadSigned !== undefined) {
    const first = shown[0];
    if (isRecord(first) && first.type === "reasoning") {
      placed.push({ ...first, encrypted_content: aheadSigned });
      rest = shown.slice(1);
    } else placed.push(signedReasoningItem(`rs_${base}`, aheadSigned));
  }
  for (let i = 0; i < rest.length; i++) {
    const item = rest[i];
    placed.push(item);
    const call = isRecord(item) ? item.call_id : undefined;
    const afterSigned = call === undefined ? undefined : encodeReasoning(after.get(call));
    if (afterSigned === undefined) continue;
    const next = rest[i + 1];
    if (isRecord(next) && next.type === "reasoning") {
      placed.push({ ...next, encrypted_content: afterSigned });
      i++;
    } else placed.push(signedReasoningItem(`rs_${base}_${placed.length}`, afterSigned));
  }
  return { ...held.response, output: placed };
}

function signedReasoningItem(id: string, encrypted: string): StateItem {
  return { type: "reasoning", id, summary: [], encrypted_content: encrypted };
}

/**
 * What an item shows of what only `include` asks for, as OpenAI shows it, whoever asked for it when
 * the item was kept: a reasoning item's `encrypted_content`, an output text's `logprobs` (an empty
 * list without), a hosted tool call's results and sources. An image of the client's own input is
 * shown either way: the Agents SDK's conversation session sends a listed image back by its
 * `image_url`, and lists without `include`.
 */
export function shownItem(item: StateItem, include: ReadonlySet<string>): StateItem {
  const hidden = (value: string, field: string) => !include.has(value) && item[field] != null;
  switch (item.type) {
    case "reasoning":
      if (!hidden("reasoning.encrypted_content", "encrypted_content")) return item;
      return without(item, "encrypted_content");
    case "message": {
      if (include.has("message.output_text.logprobs") || !Array.isArray(item.content)) return item;
      const withLogprobs = (part: unknown) =>
        isRecord(part) && Array.isArray(part.logprobs) && part.logprobs.length > 0;
      if (!item.content.some(withLogprobs)) return item;
      const content = item.content.map((part: unknown) =>
        withLogprobs(part) ? { ...(part as StateItem), logprobs: [] } : part,
      );
      return { ...item, content };
    }
    case "code_interpreter_call":
      return hidden("code_interpreter_call.outputs", "outputs") ? { ...item, outputs: null } : item;
    case "file_search_call":
      return hidden("file_search_call.results", "results") ? { ...item, results: null } : item;
    case "web_search_call": {
      const action = item.action;
      if (
        include.has("web_search_call.action.sources") ||
        !isRecord(action) ||
        !("sources" in action)
      )
        return item;
      return { ...item, action: without(action, "sources") };
    }
    default:
      return item;
  }
}

function without(item: StateItem, field: string): StateItem {
  const { [field]: _hidden, ...shown } = item;
  return shown;
}

/** A page of items as OpenAI lists them, each as `include` shows it. */
export function itemList(items: StateItem[], hasMore: boolean, include: ReadonlySet<string>) {
  const shown = items.map((item) => shownItem(item, include));
  return listPage(shown, (item) => String(item.id), hasMore);
}
