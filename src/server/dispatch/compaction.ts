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

export class CompactionSeal {
  constructor(private readonly box: SecretBox) {}

  /** A `compaction` item's `encrypted_content` for `summary`, which opens for `accountId` only. */
  seal(accountId: string, summary: string): string {
    return prefix + this.box.seal(JSON.stringify({ summary }), sealContext(accountId));
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

  /** `body` with its gateway compaction items opened; `body` itself when it has none. */
  private opened(body: Json, accountId: string): Json {
    const input = body.input;
    if (!Array.isArray(input) || !holdsGatewayItem(input)) return body;
    return {
      ...body,
      input: input.map((item, index) => {
        if (!isGatewayItem(item)) return item;
        const summary = this.summaryOf(String(item.encrypted_content), accountId);
        if (summary === undefined) throw unopenedItem(item, index);
        return summaryMessage(summary);
      }),
    };
  }

  private summaryOf(encrypted: string, accountId: string): string | undefined {
    const text = this.box.open(encrypted.slice(prefix.length), sealContext(accountId));
    if (text === undefined) return undefined;
    try {
      const parsed: unknown = JSON.parse(text);
      return isRecord(parsed) ? asString(parsed.summary) : undefined;
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
