/**
 * Function names Gemini takes: a letter or an underscore first, then letters, digits, `_`, `.`,
 * `:` and `-`, at most 64 in all. OpenAI takes a digit or a dash first (`2fa-check`) and Anthropic
 * names up to 128 characters long, so a client's name Gemini would refuse is sent under one it
 * takes and every call Gemini makes under it comes back under the client's own. The map is made
 * from the request alone (its tools, its tool choice and the calls in its history), so the gateway
 * keeps no state: each turn maps the names it holds, the same way.
 */

import type { ChatCompletionRequest } from "../../wire/openai-types.js";
import { asArray, asString, isRecord } from "../../wire/translate/shared.js";

const geminiTakes = /^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/;
const mostChars = 64;

export class FunctionNames {
  private readonly toGeminiNames = new Map<string, string>();
  private readonly toClientNames = new Map<string, string>();

  /** Every function name the request holds, each one Gemini would refuse given one it takes. */
  static of(chat: ChatCompletionRequest): FunctionNames {
    const names = requestNames(chat);
    const out = new FunctionNames();
    // A name the client already uses stays its own; a mapped one never takes it.
    const taken = new Set(names.filter((name) => geminiTakes.test(name)));
    for (const name of names) {
      if (geminiTakes.test(name) || out.toGeminiNames.has(name)) continue;
      const base = takenForm(name);
      let mapped = base;
      for (let n = 2; taken.has(mapped); n++)
        mapped = `${base.slice(0, mostChars - `_${n}`.length)}_${n}`;
      taken.add(mapped);
      out.toGeminiNames.set(name, mapped);
      out.toClientNames.set(mapped, name);
    }
    return out;
  }

  /** The name Gemini is told (the client's own where Gemini takes it). */
  toGemini(name: string): string {
    return this.toGeminiNames.get(name) ?? name;
  }

  /** The client's name for a function Gemini called. */
  toClient(name: string): string {
    return this.toClientNames.get(name) ?? name;
  }
}

/** The name with what Gemini does not take as `_`, an `_` before it if it starts wrong, cut to 64. */
function takenForm(name: string): string {
  const chars = name.replace(/[^A-Za-z0-9_.:-]/g, "_");
  return (/^[A-Za-z_]/.test(chars) ? chars : `_${chars}`).slice(0, mostChars);
}

/** The request's function names in the order they appear: tools, tool choice, then history. */
function requestNames(chat: ChatCompletionRequest): string[] {
  const names: (string | undefined)[] = [];
  for (const tool of asArray(chat.tools).filter(isRecord))
    if (isRecord(tool.function)) names.push(asString(tool.function.name));
  const choice = chat.tool_choice;
  if (isRecord(choice) && isRecord(choice.function)) names.push(asString(choice.function.name));
  for (const message of chat.messages) {
    if (message.role === "function") names.push(message.name);
    if (message.role !== "assistant") continue;
    for (const call of asArray(message.tool_calls).filter(isRecord))
      if (isRecord(call.function)) names.push(asString(call.function.name));
    if (isRecord(message.function_call)) names.push(asString(message.function_call.name));
  }
  return [...new Set(names.filter((name): name is string => name !== undefined))];
}
