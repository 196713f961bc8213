/**
 * Strict schemas toward OpenAI's chat, both ways. On the way out, a strict function or
 * `json_schema` response format whose schema has optional properties goes with them required and
 * nullable (`openAIStrictSchema`), since OpenAI's strict mode takes a property only in `required`;
 * on the way back, the nulls the model gave for them are taken out of the call's arguments and
 * the structured output, so the client gets what its own schema describes. A streamed call's
 * arguments, and a structured output's text, can only be rewritten once whole: they are held and
 * go out in one piece, the call's once it is complete (its name goes out at once), the text once
 * its answer finished.
 */

import { maxJsonDepth, nestedDeeperThan } from "../json-depth.js";
import type {
  ChatChunkChoice,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatCompletionResponse,
  ChatToolCallDelta,
} from "../openai-types.js";
import { dropAddedNulls, openAIStrictSchema } from "./openai-strict-schema.js";
import { isRecord, type JsonObject } from "./shared.js";

/**
 * The client's own schemas that went to OpenAI's strict mode with their optional properties
 * nullable: each function's by its chat name, and the structured output's.
 */
export interface AddedNulls {
  tools: Map<string, JsonObject>;
  format?: JsonObject;
}

/**
 * A chat body's strict schemas as OpenAI's strict mode takes them, and the ones whose optional
 * properties were made nullable (undefined: none). A schema strict mode cannot carry even so goes
 * without `strict` where `unfitGoes` is `"lenient"` (Anthropic's strict tools and structured
 * outputs hold any schema; OpenAI answers it non-strict where it would refuse it strict), else as
 * the client sent it (a client of OpenAI's own styles, whose API refuses it the same). The body's
 * tools and format are replaced, never changed in place: they may be the client's own.
 */
export function fitStrictSchemas(
  chat: ChatCompletionRequest,
  unfitGoes: "lenient" | "as-sent",
): AddedNulls | undefined {
  const added: AddedNulls = { tools: new Map() };
  if (Array.isArray(chat.tools))
    chat.tools = chat.tools.map((tool) => {
      const fn = tool.type === "function" && isRecord(tool.function) ? tool.function : undefined;
      if (fn?.strict !== true) return tool;
      const fit = openAIStrictSchema(fn.parameters);
      if (!fit) {
        if (unfitGoes === "as-sent") return tool;
        const { strict: _, ...lenient } = fn;
        return { ...tool, function: lenient };
      }
      if (!fit.nullable) return tool;
      added.tools.set(String(fn.name), fn.parameters as JsonObject);
      return { ...tool, function: { ...fn, parameters: fit.schema } };
    });
  const format = chat.response_format;
  if (format?.type === "json_schema" && format.json_schema.strict === true) {
    const fit = openAIStrictSchema(format.json_schema.schema);
    if (!fit && unfitGoes === "lenient") {
      const { strict: _, ...lenient } = format.json_schema;
      chat.response_format = { type: "json_schema", json_schema: lenient };
    } else if (fit?.nullable) {
      added.format = format.json_schema.schema;
      chat.response_format = {
        type: "json_schema",
        json_schema: { ...format.json_schema, schema: fit.schema },
      };
    }
  }
  return added.tools.size > 0 || added.format ? added : undefined;
}

/** A chat answer without the nulls OpenAI's strict mode added; true when it changed. */
export function dropAddedNullsFromAnswer(
  answer: ChatCompletionResponse,
  added: AddedNulls,
): boolean {
  let changed = false;
  for (const choice of answer.choices ?? []) {
    const message = choice.message;
    if (!isRecord(message)) continue;
    if (added.format && typeof message.content === "string") {
      const text = withoutNulls(message.content, added.format);
      if (text !== undefined) {
        message.content = text;
        changed = true;
      }
    }
    for (const call of message.tool_calls ?? []) {
      const fn = isRecord(call.function) ? call.function : undefined;
      const schema = fn ? added.tools.get(String(fn.name)) : undefined;
      const args = schema && typeof fn?.arguments === "string" ? fn.arguments : undefined;
      const text = args === undefined ? undefined : withoutNulls(args, schema as JsonObject);
      if (fn && text !== undefined) {
        fn.arguments = text;
        changed = true;
      }
    }
  }
  return changed;
}

/**
 * A chat stream without the nulls OpenAI's strict mode added: a strict call's arguments are held
 * until the call is complete (the next call begins, or its answer finishes) and go out in one
 * piece; a structured output's text is held until its answer finishes (or a call begins, which
 * ends the text). Everything else passes as it came. What an answer still holds when the stream
 * ends is never written: its answer did not finish, so the stream broke (it ends in the style's
 * error event), and half a call's arguments, or half a structured output, is not the client's
 * answer, nor output it is billed.
 */
export async function* withoutAddedNulls(
  chunks: AsyncIterable<ChatCompletionChunk>,
  added: AddedNulls,
): AsyncGenerator<ChatCompletionChunk> {
  const held = new HeldPieces(added);
  for await (const chunk of chunks) yield* held.push(chunk);
}

/** A call being streamed: the client's schema where its arguments are held, and those so far. */
interface StreamedCall {
  schema?: JsonObject;
  args: string;
}

/** What one answer (a choice) holds back. */
interface HeldAnswer {
  text: string;
  calls: Map<number, StreamedCall>;
}

/** The pieces of a stream's answers held until they are whole, by answer (`index`). */
class HeldPieces {
  private readonly answers = new Map<number, HeldAnswer>();

  constructor(private readonly added: AddedNulls) {}

  /** The chunk as it goes on, after the pieces it completes; none when all it carried is held. */
  push(chunk: ChatCompletionChunk): ChatCompletionChunk[] {
    if (!Array.isArray(chunk.choices) || chunk.choices.length === 0) return [chunk];
    const before: ChatCompletionChunk[] = [];
    const choices: ChatChunkChoice[] = [];
    for (const choice of chunk.choices) {
      const index = choice.index ?? 0;
      const answer = this.answer(index);
      const delta = { ...choice.delta };
      if (this.added.format && typeof delta.content === "string" && delta.content !== "") {
        answer.text += delta.content;
        delete delta.content;
      }
      if (Array.isArray(delta.tool_calls)) {
        const calls: ChatToolCallDelta[] = [];
        for (const call of delta.tool_calls) {
          const at = call.index ?? 0;
          let streamed = answer.calls.get(at);
          if (!streamed) {
            // A call begins: the text before it, and the call before it, are whole.
            before.push(...this.release(chunk, index, answer));
            const name = call.function?.name;
            streamed = { schema: name ? this.added.tools.get(name) : undefined, args: "" };
            answer.calls.set(at, streamed);
          }
          if (!streamed.schema) {
            calls.push(call);
            continue;
          }
          streamed.args += call.function?.arguments ?? "";
          // The call's id and name go on; its arguments wait until it is whole.
          if (call.id !== undefined || call.function?.name !== undefined)
            calls.push({ ...call, function: { ...call.function, arguments: "" } });
        }
        if (calls.length > 0) delta.tool_calls = calls;
        else delete delta.tool_calls;
      }
      if (choice.finish_reason) before.push(...this.release(chunk, index, answer));
      const empty = Object.keys(delta).length === 0 && !choice.finish_reason && !choice.logprobs;
      if (!empty) choices.push({ ...choice, delta });
    }
    if (choices.length === 0 && chunk.usage == null) return before;
    return [...before, { ...chunk, choices }];
  }

  private answer(index: number): HeldAnswer {
    let answer = this.answers.get(index);
    if (!answer) {
      answer = { text: "", calls: new Map() };
      this.answers.set(index, answer);
    }
    return answer;
  }

  /** The answer's held text, then its held calls' arguments, each a chunk of its own. */
  private release(like: ChatCompletionChunk, index: number, answer: HeldAnswer) {
    const out: ChatCompletionChunk[] = [];
    const piece = (delta: ChatChunkChoice["delta"]): ChatCompletionChunk => {
      const { usage: _, ...rest } = like;
      return { ...rest, choices: [{ index, delta, finish_reason: null }] };
    };
    if (answer.text !== "" && this.added.format) {
      out.push(piece({ content: withoutNulls(answer.text, this.added.format) ?? answer.text }));
      answer.text = "";
    }
    for (const [at, call] of answer.calls) {
      if (!call.schema || call.args === "") continue;
      const args = withoutNulls(call.args, call.schema) ?? call.args;
      out.push(piece({ tool_calls: [{ index: at, function: { arguments: args } }] }));
      call.args = "";
    }
    return out;
  }
}

/** JSON text without the added nulls; undefined when it had none, or is no JSON (cut short). */
function withoutNulls(text: string, schema: JsonObject): string | undefined {
  if (nestedDeeperThan(text, maxJsonDepth)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return dropAddedNulls(value, schema) ? JSON.stringify(value) : undefined;
}
