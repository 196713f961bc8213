/**
 * Tool-call ids for Gemini's function calls. Gemini names no call, so the gateway makes the id;
 * and a Gemini 3 call comes with a thought signature that must go back with the call on the
 * next turn. Every client style sends the id back (OpenAI `tool_call_id`, Anthropic
 * `tool_use_id`, Responses `call_id`), so the signature rides in the id, in characters every
 * style's ids allow (`[A-Za-z0-9_-]`), and the gateway keeps no state for it.
 */

import { randomId } from "../../wire/translate/shared.js";

/** The messages style shows `call_` ids as `toolu_` ones (`toolUseId`): any prefix goes. */
const signed = /^[A-Za-z]+_[A-Za-z0-9]{24}__ts_([A-Za-z0-9_-]+)$/;

export function callIdFor(signature: string | undefined): string {
  const id = randomId("call_");
  if (!signature) return id;
  return `${id}__ts_${Buffer.from(signature, "base64").toString("base64url")}`;
}

/** The thought signature a call id carries, as Gemini wrote it (base64). */
export function signatureOfCallId(id: string): string | undefined {
  const match = signed.exec(id);
  return match ? Buffer.from(match[1], "base64url").toString("base64") : undefined;
}
