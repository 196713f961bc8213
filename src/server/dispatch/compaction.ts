import type { SecretBox } from "../../store/secret-box.js";
import { GatewayError } from "../errors.js";
import type { CompletionRequest } from "../wire/completion-types.js";
import { asArray, asString, isRecord, randomId } from "../wire/translate/shared.js";

/**
 * A Responses `compaction` item the gateway made (POST /v1/responses/compact on a model whose
 * provider has no compaction of its own): the summary of the conversation it replaces, sealed
 * under the database's secret key, so a client can neither read a summary it did not get as text
 * nor give a model one it wrote. Whatever model the item goes to later gets the summary as a
 * message in its place. OpenAI's own items (which its API alone reads) never start with the
 * prefix, so they are told apart without trying to open them.
 */
const prefix = "mgw-compaction.";
/**
 * The seal's additional data: the account it was made for. An item another account sends (one
 * that leaked) does not open, so no one can have a model repeat another account's summary; nor
 * does a value sealed for anything else (a BYOK credential).
 */
const sealContext = (accountId: string) => `responses_compaction:${accountId}`;

/** What the summary is put in the conversation with, so the model reads it for what it is. */
const summaryLead = "Summary of the earlier conversation, which it replaces:";

/** What the model compacting a conversation is asked, after the conversation. */
export const summaryAsk =
  "Summarize the conversation above for a model that will continue it without seeing it: what the user asked for and why, what was done and decided, the facts, names, values and tool results it will need, and what is still open. Write only the summary.";

type Json = Record<string, unknown>;

/** What a gateway compaction item holds under its seal. */
type Sealed = { summary: string; window?: boolean };

export class CompactionSeal {
  constructor(private readonly box: SecretBox) {}

  /**
   * A `compaction` item's `encrypted_content` for `summary`, which opens for `accountId` only.
   * `window`: the item a turn's own compaction made, which stands for everything before it (OpenAI's
   * "the latest compaction item carries the necessary context"), so the items before it are not
   * sent again; an item of POST /v1/responses/compact comes after the user messages it keeps.
   */
  seal(accountId: string, summary: string, window = false): string {
    const sealed: Sealed = window ? { summary, window } : { summary };
    return prefix + this.box.seal(JSON.stringify(sealed), sealContext(accountId));
  }

  /**
   * A Responses request with each `compaction` item the gateway made as the message of its summary,
   * in its body and in what a turn or a compaction sends a native provider; the request as it is
   * when it has none. A gateway item that does not open (altered, or sealed under another key) is
   * a 400 naming it.
   */
  openIn(req: CompletionRequest): void {
    if (!holdsGatewayItem(req.body.input)) return;
    const turn = req.responseTurn;
    const compaction = req.compaction;
    const accountId = turn?.accountId ?? compaction?.accountId;
    // Every Responses request has its turn (or its compaction), which names its account.
    if (accountId === undefined) throw unopened(req.body.input);
    req.body = this.opened(req.body, accountId);
    if (turn) {
      const nativeBody = turn.nativeBody.bind(turn);
      req.responseTurn = {
        ...turn,
        nativeBody: (server) => this.opened(nativeBody(server), accountId),
      };
    }
    if (compaction)
      req.compaction = {
        ...compaction,
        nativeBody: (server) => this.opened(compaction.nativeBody(server), accountId),
      };
  }

  /**
   * `body` with its gateway compaction items opened; `body` itself when it has none. The items
   * before the last one a turn's compaction made are left out: its summary holds them. Their
   * system and developer messages stay: they are how the client instructs the model, not
   * conversation, and a client resends its own ahead of the item on each turn (Codex does).
   */
  private opened(body: Json, accountId: string): Json {
    const input = body.input;
    if (!Array.isArray(input) || !holdsGatewayItem(input)) return body;
    let start = 0;
    const opened = input.map((item, index) => {
      if (!isGatewayItem(item)) return item;
      const sealed = this.sealedOf(String(item.encrypted_content), accountId);
      if (sealed === undefined) throw unopenedItem(item, index);
      if (sealed.window) start = index;
      return summaryMessage(sealed.summary);
    });
    if (start === 0) return { ...body, input: opened };
    return {
      ...body,
      input: [...instructionMessages(opened.slice(0, start)), ...opened.slice(start)],
    };
  }

  private sealedOf(encrypted: string, accountId: string): Sealed | undefined {
    const text = this.box.open(encrypted.slice(prefix.length), sealContext(accountId));
    if (text === undefined) return undefined;
    try {
      const parsed: unknown = JSON.parse(text);
      const summary = isRecord(parsed) ? asString(parsed.summary) : undefined;
      if (summary === undefined) return undefined;
      return { summary, window: isRecord(parsed) && parsed.window === true };
    } catch {
      return undefined;
    }
  }
}

const isGatewayItem = (item: unknown): item is Json =>
  isRecord(item) &&
  item.type === "compaction" &&
  !!asString(item.encrypted_content)?.startsWith(prefix);

const holdsGatewayItem = (input: unknown): boolean =>
  Array.isArray(input) && input.some(isGatewayItem);

function unopenedItem(item: Json, index: number): GatewayError {
  const named = typeof item.id === "string" ? `'${item.id}' (input[${index}])` : `input[${index}]`;
  return new GatewayError(
    400,
    "bad_request",
    `Invalid \`compaction\` item ${named}: its \`encrypted_content\` was not made by this gateway for this account, or was changed since. Send the item exactly as POST /v1/responses/compact answered it, or send the conversation's items instead of it.`,
  );
}

/** The first gateway compaction item of `input`, refused as one that does not open. */
function unopened(input: unknown): GatewayError {
  const items = asArray(input);
  const index = items.findIndex(isGatewayItem);
  return unopenedItem(items[index] as Json, index);
}

/** The message a model is given in place of a gateway compaction item. */
function summaryMessage(summary: string): Json {
  return {
    type: "message",
    role: "user",
    content: [{ type: "input_text", text: `${summaryLead}\n\n${summary}` }],
  };
}

/**
 * The conversation's user messages as a compaction keeps them (OpenAI's compacted output lists
 * them ahead of its item): each as an input message of text (and the other parts it had), with an
 * id of its own. Items of any other kind, an earlier compaction included, are what the summary
 * stands for.
 */
export function keptUserMessages(items: readonly unknown[]): Json[] {
  const kept: Json[] = [];
  for (const item of items) {
    if (!isRecord(item) || item.role !== "user") continue;
    if (item.type !== undefined && item.type !== "message") continue;
    const content =
      typeof item.content === "string"
        ? [{ type: "input_text", text: item.content }]
        : asArray(item.content);
    kept.push({
      id: randomId("msg_"),
      type: "message",
      status: "completed",
      role: "user",
      content,
    });
  }
  return kept;
}

/** A compaction a Responses turn asks of the gateway before its model answers. */
export type TurnCompaction =
  /** `compaction_trigger` last in `input`: compact now; the compaction item is the whole answer. */
  | { kind: "trigger" }
  /** `context_management` compaction: compact once the rendered input passes `threshold` tokens. */
  | { kind: "threshold"; threshold: number };

/**
 * What compaction a Responses body asks for, as OpenAI's API reads it: a `compaction_trigger` as
 * the final input item, or a `context_management` entry of type `compaction` with its
 * `compact_threshold`; undefined when neither (an entry without a threshold sets none to pass).
 */
export function turnCompaction(body: Json): TurnCompaction | undefined {
  const input = body.input;
  if (Array.isArray(input) && isTrigger(input.at(-1))) return { kind: "trigger" };
  for (const entry of asArray(body.context_management)) {
    if (!isRecord(entry) || entry.type !== "compaction") continue;
    const threshold = entry.compact_threshold;
    if (typeof threshold === "number" && Number.isFinite(threshold))
      return { kind: "threshold", threshold };
  }
  return undefined;
}

const isTrigger = (item: unknown): boolean => isRecord(item) && item.type === "compaction_trigger";

/** The conversation a turn's compaction summarizes: its input items, the trigger left out. */
export function conversationOf(input: unknown): unknown[] {
  const items = typeof input === "string" ? [{ role: "user", content: input }] : asArray(input);
  return items.filter((item) => !isTrigger(item));
}

/**
 * The user messages that end a conversation (what the turn asks now), which the model answering a
 * compacted turn is given after the summary: the summary holds them too, but a model answers the
 * request in front of it, not one it reads about.
 */
export function lastUserMessages(items: readonly unknown[]): unknown[] {
  let start = items.length;
  while (start > 0) {
    const item = items[start - 1];
    if (!isRecord(item) || item.role !== "user") break;
    if (item.type !== undefined && item.type !== "message") break;
    start--;
  }
  return items.slice(start);
}

/**
 * The system and developer messages of a conversation, in order: the client's instructions, which
 * a compaction does not stand for, so the model answering after it still reads them.
 */
export function instructionMessages(items: readonly unknown[]): unknown[] {
  return items.filter(
    (item) =>
      isRecord(item) &&
      (item.role === "system" || item.role === "developer") &&
      (item.type === undefined || item.type === "message"),
  );
}

/** The `compaction` output item of a summary sealed for a turn. */
export function compactionItem(encrypted: string): Json {
  return { id: randomId("cmp_"), type: "compaction", encrypted_content: encrypted };
}
