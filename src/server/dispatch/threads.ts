import type { ThreadConversation, ThreadsRepository } from "../../store/threads.js";
import type { Catalog } from "../../store/types.js";
import { GatewayError } from "../errors.js";
import { servesNatively } from "../providers/registry.js";
import type { CompletionResult, MessageThread } from "../wire/completion-types.js";
import { parseEventData } from "../wire/sse.js";
import type { StreamPiece } from "../wire/stream-types.js";
import type { Target } from "./resolve.js";

/**
 * Anthropic message threads (beta `message-threads-2026-08-12`) toward models the gateway
 * translates to: the client sends `thread: {type: "create"}` with the whole conversation, then
 * `{type: "continue", previous_message_id}` with only the new turn. The gateway keeps each
 * thread's conversation (per account, expiring) so every turn is sent whole, without `thread`;
 * a target of anthropic-wire models only holds its own threads and gets the body as written.
 */
type Json = Record<string, unknown>;

/**
 * The thread a messages request creates or continues, with the body to send in its place; or
 * undefined when the request has no thread or the gateway does not hold it. An unknown, expired
 * or other account's `previous_message_id` is the 404 `thread_not_found` the SDKs answer by
 * sending the whole conversation again.
 */
export async function openThread(
  threads: ThreadsRepository,
  catalog: Catalog,
  accountId: string,
  body: Json,
  target: Target,
  /** The gateway's clock: a thread expires by it, as everything else the gateway times. */
  now: () => number,
): Promise<{ body: Json; thread: MessageThread; replayedBytes: number } | undefined> {
  const field = body.thread;
  if (typeof field !== "object" || field === null) return undefined;
  // A provider that speaks Messages itself holds its threads itself.
  const native = target.models.every((m) => {
    const provider = catalog.providers.get(m.provider_id);
    return provider !== undefined && servesNatively(provider, "messages");
  });
  if (native) return undefined;
  const { type, previous_message_id: previousId } = field as Json;
  const newTurn = Array.isArray(body.messages) ? body.messages : [];
  let conversation: ThreadConversation;
  // The admission hold covers the input sent, the held conversation included, not only the
  // client's body (a continued turn's body holds only the new turn).
  let replayedBytes = 0;
  if (type === "continue") {
    const held =
      typeof previousId === "string" ? await threads.find(accountId, previousId, now()) : undefined;
    if (!held) throw threadNotFound();
    // `system` and `tools` are the thread's, fixed when it was created: Anthropic refuses a
    // continue that sends others (the SDK's ThreadFingerprintMismatchError) rather than answer
    // with the ones it holds in their place.
    const changed = (["system", "tools"] as const).filter(
      (name) =>
        body[name] !== undefined && JSON.stringify(body[name]) !== JSON.stringify(held[name]),
    );
    if (changed.length > 0) throw fingerprintMismatch(changed);
    conversation = { ...held, messages: [...held.messages, ...newTurn] };
    replayedBytes = Buffer.byteLength(JSON.stringify(held));
  } else {
    conversation = { system: body.system, tools: body.tools, messages: newTurn };
  }
  const { thread: _thread, ...rest } = body;
  const whole: Json = { ...rest, messages: conversation.messages };
  if (conversation.system !== undefined) whole.system = conversation.system;
  if (conversation.tools !== undefined) whole.tools = conversation.tools;
  return {
    body: whole,
    replayedBytes,
    thread: {
      conversation,
      record(replyId, content) {
        const messages = [...conversation.messages, { role: "assistant", content }];
        return threads.save(
          accountId,
          replyId,
          { ...conversation, messages },
          typeof previousId === "string" ? previousId : undefined,
          now(),
        );
      },
    },
  };
}

function fingerprintMismatch(fields: string[]): GatewayError {
  const names = fields.map((field) => `\`${field}\``).join(" and ");
  return new GatewayError(
    400,
    "bad_request",
    `${names} differ from the value stored with the Thread: a continue keeps the thread's. Send the stored values, or replay the full conversation with \`thread: {"type": "create"}\` to change them.`,
    { details: { error_code: "thread_fingerprint_mismatch" } },
  );
}

function threadNotFound(): GatewayError {
  return new GatewayError(
    404,
    "not_found",
    'No usable Thread state was found for `previous_message_id`. Replay the full conversation with `thread: {"type": "create"}` to start a new Thread.',
    { details: { error_code: "thread_not_found" } },
  );
}

/**
 * The result, recording its reply as the thread's last turn once the reply is whole: a whole
 * answer before it is handed on, so the client's next turn finds it.
 */
export async function withThread<T extends CompletionResult>(
  result: T,
  thread: MessageThread,
): Promise<T> {
  const held = thread;
  if (result.kind === "json") {
    const reply = result.body as { id?: unknown; content?: unknown };
    if (typeof reply.id === "string" && Array.isArray(reply.content))
      await thread.record(reply.id, reply.content);
    return result;
  }
  const pieces = result.pieces;
  const reply = new ReplyAssembler();
  async function* recorded(): AsyncGenerator<StreamPiece> {
    for (let next = await pieces.next(); !next.done; next = await pieces.next()) {
      reply.push(next.value);
      yield next.value;
    }
    if (reply.id && reply.stopped) await held.record(reply.id, reply.content());
  }
  return { ...result, pieces: recorded() };
}

/** A messages-style SSE stream, read back into the reply's id and content blocks. */
class ReplyAssembler {
  id: string | undefined;
  stopped = false;
  private readonly blocks: Json[] = [];
  private readonly json: string[] = [];

  push(piece: StreamPiece): void {
    const text = typeof piece === "string" ? piece : Buffer.from(piece).toString("utf8");
    for (const line of text.split("\n")) {
      if (!line.startsWith("data:")) continue;
      const event = parseEventData(line.slice(5).trim()) as Json | undefined;
      if (event) this.take(event);
    }
  }

  private take(event: Json): void {
    const index = typeof event.index === "number" ? event.index : -1;
    if (event.type === "message_start") {
      const message = event.message as Json | undefined;
      if (typeof message?.id === "string") this.id = message.id;
    } else if (event.type === "content_block_start") {
      this.blocks[index] = { ...(event.content_block as Json) };
      this.json[index] = "";
    } else if (event.type === "content_block_delta") {
      const block = this.blocks[index];
      const delta = event.delta as Json | undefined;
      if (!block || !delta) return;
      if (delta.type === "text_delta") block.text = `${block.text ?? ""}${delta.text}`;
      else if (delta.type === "thinking_delta")
        block.thinking = `${block.thinking ?? ""}${delta.thinking}`;
      else if (delta.type === "signature_delta") block.signature = delta.signature;
      else if (delta.type === "input_json_delta") this.json[index] += String(delta.partial_json);
    } else if (event.type === "message_stop") {
      this.stopped = true;
    }
  }

  content(): unknown[] {
    return this.blocks.map((block, i) => {
      if (block.type !== "tool_use" || !this.json[i]) return block;
      try {
        return { ...block, input: JSON.parse(this.json[i]) };
      } catch {
        return block;
      }
    });
  }
}
