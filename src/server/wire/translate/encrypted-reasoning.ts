/**
 * A Responses reasoning item's `encrypted_content` on the bridge: the signed reasoning a chat
 * answer carried (`reasoning_details`: Anthropic's thinking with its signature, its redacted
 * thinking), which a client that keeps no state on the server (`store: false`, as Codex runs)
 * sends back on its next turn so the model can keep thinking through a tool loop.
 *
 * Encoded, not sealed: what it holds is the client's own answer, which a chat client gets in the
 * clear, and its provider checks the signature (Anthropic refuses altered or unsigned thinking).
 * A seal would add a key that must open it on every gateway and after every restart or rotation,
 * or the thinking is lost where a stateless client relies on it. The prefix tells the gateway's
 * own value from another API's (OpenAI's is a token the gateway cannot read), which is left out.
 */

import type { ReasoningDetail } from "../openai-types.js";
import { asArray, asNumber, asString, isRecord, type JsonObject } from "./shared.js";

const prefix = "mgw1.";

/** The details as an opaque string; undefined when there are none. */
export function encodeReasoning(details: unknown): string | undefined {
  const kept = reasoningDetails(details);
  if (kept.length === 0) return undefined;
  return prefix + Buffer.from(JSON.stringify(kept)).toString("base64url");
}

/** The details a reasoning item's `encrypted_content` holds; none when the gateway did not make it. */
export function decodeReasoning(encrypted: unknown): ReasoningDetail[] {
  const text = asString(encrypted);
  if (!text?.startsWith(prefix)) return [];
  try {
    return reasoningDetails(
      JSON.parse(Buffer.from(text.slice(prefix.length), "base64url").toString()),
    );
  } catch {
    return [];
  }
}

/**
 * A Responses body for a provider that speaks the Responses API itself, without the reasoning
 * items whose `encrypted_content` the gateway made (a client that kept no state sends back what an
 * anthropic-wire model answered): that provider cannot open them and would refuse the request.
 * The body itself when it has none.
 */
export function withoutGatewayReasoning<T extends Record<string, unknown>>(body: T): T {
  const input = body.input;
  if (!Array.isArray(input) || !input.some(isGatewayReasoning)) return body;
  return { ...body, input: input.filter((item) => !isGatewayReasoning(item)) };
}

const isGatewayReasoning = (item: unknown): boolean =>
  isRecord(item) &&
  item.type === "reasoning" &&
  !!asString(item.encrypted_content)?.startsWith(prefix);

/**
 * The well-formed details of a list, each with only the fields a detail has. The pieces of one
 * detail are put together first: a server that streams a detail (OpenRouter) sends its text in
 * pieces and its signature in a last one, each under the detail's `index`, and only the whole
 * detail is signed.
 */
function reasoningDetails(value: unknown): ReasoningDetail[] {
  const out: ReasoningDetail[] = [];
  for (const detail of wholeDetails(value)) {
    const format = asString(detail.format);
    const after = asString(detail.after_tool_call_id);
    const common = {
      ...(format ? { format } : {}),
      ...(after ? { after_tool_call_id: after } : {}),
    };
    if (detail.type === "reasoning.text") {
      const signature = asString(detail.signature);
      out.push({
        type: "reasoning.text",
        text: asString(detail.text) ?? "",
        ...(signature ? { signature } : {}),
        ...common,
      });
    } else if (detail.type === "reasoning.encrypted" && asString(detail.data)) {
      out.push({ type: "reasoning.encrypted", data: String(detail.data), ...common });
    }
  }
  return out;
}

/**
 * The details of a list with the pieces of each (same `index` and type) joined: text and data
 * end to end, each other field (the signature, in a last piece) as the first piece to give it.
 * A detail without an index is whole.
 */
function wholeDetails(value: unknown): JsonObject[] {
  const out: JsonObject[] = [];
  const byIndex = new Map<string, JsonObject>();
  for (const piece of asArray(value)) {
    if (!isRecord(piece)) continue;
    const index = asNumber(piece.index);
    const key = index === undefined ? undefined : `${index} ${String(piece.type)}`;
    const whole = key === undefined ? undefined : byIndex.get(key);
    if (!whole) {
      const first = { ...piece };
      out.push(first);
      if (key !== undefined) byIndex.set(key, first);
      continue;
    }
    for (const [field, given] of Object.entries(piece)) {
      if (given == null || given === "") continue;
      if (field === "text" || field === "data")
        whole[field] = (asString(whole[field]) ?? "") + String(given);
      else if (whole[field] == null || whole[field] === "") whole[field] = given;
    }
  }
  return out;
}
