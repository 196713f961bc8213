import type {
  ResponsesStateRepository,
  StateItem,
  StoredResponse,
} from "../../store/responses-state.js";
import { GatewayError } from "../errors.js";
import type { Attempt } from "../providers/provider.js";
import { servesNatively } from "../providers/registry.js";
import type { CompletionResult, NativeServer, ResponseTurn } from "../wire/completion-types.js";
import { parseEventData } from "../wire/sse.js";
import type { StreamPiece } from "../wire/stream-types.js";
import { randomId } from "../wire/translate/shared.js";
import { keyFingerprint } from "./key-pool.js";

/**
 * The Responses API's state on every wire. `store` defaults to true: each response is kept (its
 * turn's input items and its output, per account, expiring), and a request with
 * `previous_response_id` or `conversation` is sent with the whole chain before its own input, as
 * the provider would have seen it had it kept the state itself. A `responses_native` provider
 * that served the response named gets the client's body as written (it holds its own chain).
 */
type Json = Record<string, unknown>;

export interface ResponseStateContext {
  repo: ResponsesStateRepository;
  accountId: string;
  /** The gateway's clock: rows expire by it, as everything else the gateway times. */
  now: () => number;
  ttlMs: number;
}

/**
 * The turn a responses request makes, with the body to translate in its place (the chain's
 * items, then its own input); the client's own body when nothing is to be kept or replayed
 * (`store: false` and no conversation), whose turn only names a native answer. An unknown, expired, `store: false` or other account's
 * `previous_response_id` (or conversation) is a 400 naming the parameter.
 */
export async function openResponseTurn(
  context: ResponseStateContext,
  body: Json,
): Promise<{ body: Json; turn: ResponseTurn; replayedBytes: number }> {
  const previousId = optionalId(body.previous_response_id, "previous_response_id");
  const conversationId = conversationOf(body.conversation);
  if (previousId && conversationId) {
    throw new GatewayError(
      400,
      "bad_request",
      "`previous_response_id` and `conversation` cannot be used together: a conversation already carries the turns before this one.",
    );
  }
  const duplicate = duplicateItemId(body.input);
  if (duplicate !== undefined) {
    throw new GatewayError(
      400,
      "bad_request",
      `Duplicate item found with id '${duplicate}' in \`input\`: a turn's items are listed and paged by their ids (\`input_items\`), so each item, or \`item_reference\`, must name a different one.`,
    );
  }
  const store = body.store !== false;
  if (!store && !previousId && !conversationId && !namesStoredItem(body.input))
    return { body, replayedBytes: 0, turn: unstoredTurn(context.accountId, body) };
  const { repo, accountId, now } = context;

  let history: StateItem[] = [];
  // The `responses_native` provider (and key) that holds the chain, and the id it holds the
  // response named under.
  let nativeHolder: string | null = null;
  let nativePrevious: string | null = null;
  // The conversation the chain starts on; how far into its conversation this turn reads, and how
  // many items.
  let chainConversation: string | undefined;
  let read = { through: 0, count: 0 };
  if (previousId) {
    const chain = await repo.responseChain(accountId, previousId, now());
    if (!chain) throw unknownPrevious(previousId);
    // A chain whose first turn was made on a conversation goes on from everything that turn was
    // sent: the conversation's items before it (as they were then, less those deleted since).
    const started = chain[0].conversation;
    if (started) chainConversation = started.id;
    const prefix = started
      ? await repo.conversationContext(accountId, started.id, started.through, now())
      : [];
    // A chain whose oldest response continues one no longer held was cut by a delete, and so was
    // one whose conversation lost an item it was sent: the provider's own chain still has what was
    // deleted, so it is sent the gateway's instead.
    const last = chain[chain.length - 1];
    const cut = chain[0].previousResponseId !== null || prefix.length < (started?.count ?? 0);
    if (!cut && last.nativeId !== null) {
      nativeHolder = last.nativeHolder;
      nativePrevious = last.nativeId;
    }
    history = [
      ...prefix,
      ...chain.flatMap((r) => [...r.inputItems, ...signedItems(r), ...outputItems(r.response)]),
    ];
  } else if (conversationId) {
    const held = await repo.replayItems(accountId, conversationId, now());
    if (!held) throw unknownConversation(conversationId);
    history = held.items;
    read = { through: held.through, count: held.items.length };
  }
  const repeated = heldItemId(body.input, history);
  if (repeated !== undefined) {
    const holder = previousId
      ? "the turns of `previous_response_id` already hold it"
      : "the conversation already holds it";
    throw new GatewayError(
      400,
      "bad_request",
      `Duplicate item found with id '${repeated}': ${holder}, and would be sent twice. Send in \`input\` only the items that are new since then.`,
    );
  }
  const { items: input, references } = inputItems(body.input);
  if (references.length > 0) await resolveReferences(context, input, references, "input");
  const thought = await withKeptThinking(context, input);
  const rewritten = history.length > 0 || references.length > 0 || thought.bytes > 0;
  const replay = rewritten ? { ...body, input: [...history, ...thought.items] } : body;
  // The admission hold covers the input sent, the chain, the items referenced and the thinking
  // kept included, not only the client's body.
  let replayedBytes = history.length > 0 ? Buffer.byteLength(JSON.stringify(history)) : 0;
  for (const at of references) replayedBytes += Buffer.byteLength(JSON.stringify(input[at]));
  replayedBytes += thought.bytes;

  // A native server's answer is given the gateway's id: a server may give its own ids again (to
  // another chain, another account), and the client continues with the one it got.
  const ownId = randomId("resp_");
  let nativeId: string | null = null;
  let signed: { responseId: string; encrypted: string } | undefined;
  const outputIds = uniqueOutputIds([...history, ...input]);

  return {
    body: replay,
    replayedBytes,
    turn: {
      accountId,
      nativeBody(server) {
        // The provider that served the response named holds the chain under its own id; an
        // item_reference names an item of the gateway's, which it may not hold.
        if (nativeHolder !== null && nativeHolder === holderOf(server)) {
          const held: Json = { ...body, previous_response_id: nativePrevious };
          if (references.length > 0) held.input = referencedItems(body.input, input, references);
          return held;
        }
        // Nothing replayed and nothing to leave out: the client's body itself, as it sent it.
        if (!rewritten && !("previous_response_id" in body) && !("conversation" in body))
          return body;
        const native: Json = {
          ...replay,
          input: rewritten ? forNative(replay.input) : body.input,
        };
        delete native.previous_response_id;
        delete native.conversation;
        return native;
      },
      echo(response) {
        if (typeof response.id === "string" && response.id !== ownId) nativeId = response.id;
        echoResponse(response, ownId, outputIds);
        response.previous_response_id = previousId ?? null;
        if (conversationId) response.conversation = { id: conversationId };
      },
      echoItem: (event) => outputIds.echo(event),
      renamesItems: () => outputIds.renamed,
      keepSigned:
        store || conversationId
          ? (responseId, encrypted) => {
              signed = { responseId, encrypted };
            }
          : undefined,
      async record(answer, native) {
        const id = answer.id;
        if (typeof id !== "string") return;
        const at = now();
        const output = outputItems(answer);
        const heldNatively = native !== null && nativeId !== null;
        const signedReasoning = signed?.responseId === id ? signed.encrypted : null;
        const response: StoredResponse | undefined = store
          ? {
              id,
              accountId,
              previousResponseId: previousId ?? null,
              nativeHolder: heldNatively ? holderOf(native) : null,
              nativeId: heldNatively ? nativeId : null,
              response: answer,
              inputItems: input,
              signedReasoning,
              conversation: conversationId ? { id: conversationId, ...read } : null,
              createdAt: at,
            }
          : undefined;
        // The conversation keeps the signed reasoning its client was not shown before the
        // answer, as a chain keeps it with the response: thinking stays on through a tool loop.
        const kept =
          signedReasoning !== null && output.length > 0
            ? { before: input.length, item: signedItem(signedReasoning, randomId("rs_")) }
            : undefined;
        await repo.saveTurn({
          accountId,
          response,
          conversation: conversationId
            ? { id: conversationId, items: [...input, ...output], signed: kept }
            : undefined,
          chainConversation,
          now: at,
          expiresAt: at + context.ttlMs,
        });
      },
    },
  };
}

/**
 * The turn of a request that keeps nothing and continues nothing (`store: false`, no conversation,
 * no `item_reference`): a native server's answer still gets the gateway's id, as every answer
 * does, and the server's is forgotten. The client cannot tell the answers apart by where they were
 * served, and an id the server gives again never names two answers.
 */
function unstoredTurn(accountId: string, body: Json): ResponseTurn {
  const ownId = randomId("resp_");
  const outputIds = uniqueOutputIds(inputItems(body.input).items);
  return {
    accountId,
    nativeBody: () => body,
    echo: (response) => echoResponse(response, ownId, outputIds),
    echoItem: (event) => outputIds.echo(event),
    renamesItems: () => outputIds.renamed,
    async record() {},
  };
}

/** A native server's Response under the gateway's id, each output item under the id chosen for it. */
function echoResponse(
  response: Json,
  ownId: string,
  outputIds: ReturnType<typeof uniqueOutputIds>,
): void {
  response.id = ownId;
  const output = response.output;
  if (Array.isArray(output))
    for (const [index, item] of output.entries())
      if (isItem(item)) item.id = outputIds.idOf(index, item);
}

/**
 * Who holds a response a native server made under its id: the provider, and which of its keys
 * (by fingerprint, never the key): a pool's keys may be different projects', and a project holds
 * only its own responses.
 */
function holderOf(server: NativeServer): string {
  return `${server.providerId} ${keyFingerprint(server.secret ?? "")}`;
}

function optionalId(value: unknown, field: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string" && value !== "") return value;
  throw new GatewayError(400, "bad_request", `\`${field}\` must be a non-empty string.`);
}

/** `conversation` is an id, or `{id}`. */
function conversationOf(value: unknown): string | undefined {
  if (typeof value === "object" && value !== null && !Array.isArray(value))
    return optionalId((value as Json).id, "conversation.id");
  return optionalId(value, "conversation");
}

export function unknownPrevious(id: string): GatewayError {
  return new GatewayError(
    400,
    "bad_request",
    `Previous response with id '${id}' not found. \`previous_response_id\` must name a response this account stored (not with \`store: false\`) that has not expired or been deleted.`,
  );
}

function unknownConversation(id: string): GatewayError {
  return new GatewayError(
    400,
    "bad_request",
    `Conversation with id '${id}' not found. \`conversation\` must name a conversation of this account that has not expired or been deleted.`,
  );
}

/** A stored Response's output items. */
function outputItems(response: Json): StateItem[] {
  const output = response.output;
  return Array.isArray(output) ? output.filter(isItem) : [];
}

/**
 * The signed reasoning a stored response kept where its client was not shown it, as the reasoning
 * item that goes back ahead of the response's output (an anthropic-wire model keeps thinking
 * through a tool loop only with it).
 */
function signedItems(response: StoredResponse): StateItem[] {
  const encrypted = response.signedReasoning;
  return encrypted === null ? [] : [signedItem(encrypted)];
}

/** Signed reasoning as the reasoning item a chain or conversation replays. */
function signedItem(encrypted: string, id?: string): StateItem {
  return { type: "reasoning", ...(id ? { id } : {}), summary: [], encrypted_content: encrypted };
}

const outputPrefixes: Record<string, string> = {
  message: "msg_",
  function_call: "fc_",
  reasoning: "rs_",
  custom_tool_call: "ctc_",
};

/**
 * The ids of a native answer's output items, by their place in the output: the server's own,
 * unless it gave none, or one that `held` (the chain's or conversation's items, the turn's input)
 * or an earlier item of the answer has; that item gets an id of the gateway's. A server may give
 * its ids again (numbering its items per response, or from a small range): an id given twice
 * would have a conversation keep one of the two items, a chain send two items under one id, and
 * an `item_reference` name the other one. Every event of a stream that names the item (`item`,
 * or `item_id` beside its `output_index`) names it by the id chosen at its first.
 */
function uniqueOutputIds(held: StateItem[]) {
  const taken = new Set<unknown>(held.map((item) => item.id));
  const chosen = new Map<number, { given: unknown; id: string }>();
  const ids = {
    /** Whether an item of the answer so far was given an id of the gateway's. */
    renamed: false,
    idOf(index: number, item: StateItem): string {
      const known = chosen.get(index);
      if (known) return known.id;
      const given = item.id;
      const own = typeof given === "string" && given !== "" && !taken.has(given);
      const id = own ? given : randomId(outputPrefixes[String(item.type)] ?? "item_");
      if (!own) ids.renamed = true;
      taken.add(id);
      chosen.set(index, { given, id });
      return id;
    },
    /** An event of the stream: whether it now names its item otherwise than the server did. */
    echo(event: Json): boolean {
      const index = event.output_index;
      if (typeof index !== "number") return false;
      if (isItem(event.item)) {
        const given = event.item.id;
        event.item.id = ids.idOf(index, event.item);
        return event.item.id !== given;
      }
      const known = chosen.get(index);
      if (!known || known.given === known.id || event.item_id !== known.given) return false;
      event.item_id = known.id;
      return true;
    },
  };
  return ids;
}

const isItem = (value: unknown): value is StateItem =>
  typeof value === "object" && value !== null && !Array.isArray(value);

const idPrefixes: Record<string, string> = {
  message: "msg_",
  function_call: "fc_",
  function_call_output: "fco_",
};

/** The first id that two items of `input` give (an `item_reference` gives the id it names). */
function duplicateItemId(input: unknown): string | undefined {
  if (!Array.isArray(input)) return undefined;
  const seen = new Set<string>();
  for (const item of input) {
    if (!isItem(item) || typeof item.id !== "string") continue;
    if (seen.has(item.id)) return item.id;
    seen.add(item.id);
  }
  return undefined;
}

/**
 * The first id in `input` (an `item_reference` gives the id it names) that an item of `history`
 * (the chain's, or the conversation's) has: OpenAI refuses an item sent twice.
 */
function heldItemId(input: unknown, history: StateItem[]): string | undefined {
  if (!Array.isArray(input) || history.length === 0) return undefined;
  const held = new Set<unknown>(history.map((item) => item.id));
  for (const item of input)
    if (isItem(item) && typeof item.id === "string" && held.has(item.id)) return item.id;
  return undefined;
}

/** Whether `input` refers to a stored item (`item_reference`), which a turn resolves. */
function namesStoredItem(input: unknown): boolean {
  return (
    Array.isArray(input) && input.some((item) => isItem(item) && item.type === "item_reference")
  );
}

/**
 * The request's `input` as items, each with an id and in the shape OpenAI lists them (a string
 * is one user message; a message's string content is one text part). An `item_reference` is
 * left in place, its index listed in `references` for `resolveReferences`.
 */
export function inputItems(input: unknown): { items: StateItem[]; references: number[] } {
  if (typeof input === "string")
    return { items: [asItem({ role: "user", content: input })], references: [] };
  if (!Array.isArray(input)) return { items: [], references: [] };
  const items: StateItem[] = [];
  const references: number[] = [];
  for (const raw of input) {
    if (!isItem(raw)) continue;
    if (raw.type === "item_reference") references.push(items.length);
    items.push(raw.type === "item_reference" ? raw : asItem(raw));
  }
  return { items, references };
}

/**
 * Items for a conversation (`items` of POST /v1/conversations and of its items route), each with
 * its id, an `item_reference` as the item it names: a conversation holds items, and replays them
 * to providers that know no references. One that names no item the account holds (of its stored
 * responses or conversations) is a 400, as in `input`.
 */
export async function conversationItems(
  context: Pick<ResponseStateContext, "repo" | "accountId" | "now">,
  raw: StateItem[],
): Promise<StateItem[]> {
  const { items, references } = inputItems(raw);
  if (references.length > 0) await resolveReferences(context, items, references, "items");
  return items;
}

/**
 * Puts in place of each `item_reference` at `references` the item it names, from the account's
 * stored responses (the AI SDK refers to earlier turns so while responses are stored) or its
 * conversations (an item added to one, or of a `store: false` turn on one). One that names no such
 * item is a 400 naming the reference and `field`: the turn it stood for would be lost.
 */
async function resolveReferences(
  context: Pick<ResponseStateContext, "repo" | "accountId" | "now">,
  items: StateItem[],
  references: number[],
  field: "input" | "items",
): Promise<void> {
  const ids = references.map((at) => String(items[at].id));
  const found = await context.repo.findItems(context.accountId, ids, context.now());
  for (const at of references) {
    const id = String(items[at].id);
    const item = found.find((candidate) => candidate.id === id);
    if (!item) {
      throw new GatewayError(
        400,
        "bad_request",
        `Item with id '${id}' not found: an \`item_reference\` in \`${field}\` must name an item of a response this account stored, or of one of its conversations, that has not expired or been deleted.`,
      );
    }
    items[at] = item;
  }
}

/** Items of an answer, which a client sends back by their ids. */
const answerItem = (item: StateItem): boolean =>
  item.type === "reasoning" ||
  item.type === "function_call" ||
  item.type === "custom_tool_call" ||
  (item.type === "message" && item.role === "assistant");

/**
 * The turn's `input` as its provider is sent it: an answer of a stored response that the client
 * sends back by its items' ids, without the signed thinking the gateway kept with it where the
 * client was not shown it (the Agents SDK sends a tool loop and a session's history so, relying on
 * the server to hold the rest, as OpenAI's API holds a stored reasoning item), gets that thinking
 * back: in the reasoning item it sent without `encrypted_content`, or as one ahead of the answer's
 * first item. An anthropic-wire model keeps thinking through the loop, as a chain continued with
 * `previous_response_id` does. The stored turn keeps its input as the client sent it.
 */
async function withKeptThinking(
  context: Pick<ResponseStateContext, "repo" | "accountId" | "now">,
  input: StateItem[],
): Promise<{ items: StateItem[]; bytes: number }> {
  const ids = input
    .filter((item) => answerItem(item) && item.encrypted_content == null)
    .map((item) => item.id)
    .filter((id): id is string => typeof id === "string");
  if (ids.length === 0) return { items: input, bytes: 0 };
  const kept = await context.repo.signedReasoningBefore(context.accountId, ids, context.now());
  if (kept.size === 0) return { items: input, bytes: 0 };
  const items: StateItem[] = [];
  let bytes = 0;
  for (const item of input) {
    const encrypted = typeof item.id === "string" ? kept.get(item.id) : undefined;
    const before = items.at(-1);
    const carried = before?.type === "reasoning" && typeof before.encrypted_content === "string";
    if (encrypted === undefined || carried || item.encrypted_content != null) {
      items.push(item);
      continue;
    }
    if (item.type === "reasoning") items.push({ ...item, encrypted_content: encrypted });
    else items.push(signedItem(encrypted), item);
    bytes += Buffer.byteLength(encrypted);
  }
  return { items, bytes };
}

/** One input item with its type, status and id filled in where the client left them out. */
export function asItem(raw: StateItem): StateItem {
  const item: StateItem = { ...raw };
  if (item.type === undefined && typeof item.role === "string") item.type = "message";
  const type = typeof item.type === "string" ? item.type : "message";
  if (type === "message" && typeof item.content === "string") {
    item.content = [
      item.role === "assistant"
        ? { type: "output_text", text: item.content, annotations: [] }
        : { type: "input_text", text: item.content },
    ];
  }
  if (type in idPrefixes && item.status === undefined) item.status = "completed";
  if (typeof item.id !== "string" || item.id === "")
    item.id = randomId(idPrefixes[type] ?? "item_");
  return item;
}

/**
 * The client's `input` with each `item_reference` (at `references` of its `items`) as the item it
 * names, sent as a replayed item is (`forNative`); its other items as it wrote them.
 */
function referencedItems(raw: unknown, items: StateItem[], references: number[]): unknown[] {
  const resolved = new Set(references);
  const written = Array.isArray(raw) ? raw.filter(isItem) : [];
  return written.flatMap((item, at) => (resolved.has(at) ? forNative([items[at]]) : [item]));
}

/**
 * Items replayed to a provider that did not make them: without the ids (a provider looks up the
 * ids it is sent among its own items) and without reasoning items (another provider's state).
 */
function forNative(items: unknown): unknown[] {
  if (!Array.isArray(items)) return [];
  return items
    .filter((item) => !(isItem(item) && item.type === "reasoning"))
    .map((item) => {
      if (!isItem(item)) return item;
      const { id: _id, ...rest } = item;
      return rest;
    });
}

/**
 * The result, recording the response once it is whole: a JSON answer before it is handed on, a
 * stream's at its final `response.completed` (or `.incomplete`) event, before that event goes out,
 * so the client's next turn finds it.
 */
export async function withResponseTurn<T extends CompletionResult>(
  result: T,
  turn: ResponseTurn,
  attempt: Pick<Attempt, "provider" | "credential">,
): Promise<T> {
  const { provider } = attempt;
  const native = servesNatively(provider, "responses")
    ? { providerId: provider.id, secret: attempt.credential.secret }
    : null;
  if (result.kind === "json") {
    if (isItem(result.body) && isFinal(result.body.status)) await turn.record(result.body, native);
    return result;
  }
  const pieces = result.pieces;
  async function* recorded(): AsyncGenerator<StreamPiece> {
    for (let next = await pieces.next(); !next.done; next = await pieces.next()) {
      const response = finalResponse(next.value);
      if (response) await turn.record(response, native);
      yield next.value;
    }
  }
  return { ...result, pieces: recorded() };
}

const isFinal = (status: unknown) => status === "completed" || status === "incomplete";

const finalEvents = ["event: response.completed\n", "event: response.incomplete\n"];

/** The Response a stream's final event carries; undefined for every other piece. */
function finalResponse(piece: StreamPiece): Json | undefined {
  if (typeof piece !== "string" || !finalEvents.some((name) => piece.startsWith(name)))
    return undefined;
  const data = piece.split("\n").find((line) => line.startsWith("data:"));
  const event = data ? parseEventData(data.slice(5).trim()) : undefined;
  const response = isItem(event) ? event.response : undefined;
  return isItem(response) ? response : undefined;
}
