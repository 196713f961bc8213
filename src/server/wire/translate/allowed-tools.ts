import type { ChatCompletionRequest } from "../openai-types.js";
import { asArray, asString, isRecord } from "./shared.js";

/**
 * Chat's `tool_choice: {type: "allowed_tools", allowed_tools: {mode, tools}}` for a wire that has
 * no such choice (Anthropic, Gemini): only the allowed tools are sent, and the mode becomes the
 * plain choice (`auto`, or `required` for Anthropic's `any`), so the model can call nothing else.
 * Any other request is returned as it is.
 */
export function withAllowedToolsOnly(chat: ChatCompletionRequest): ChatCompletionRequest {
  const choice = chat.tool_choice;
  if (!isRecord(choice) || choice.type !== "allowed_tools") return chat;
  const allowed = isRecord(choice.allowed_tools) ? choice.allowed_tools : {};
  const names = new Set(
    asArray(allowed.tools).flatMap((tool) => {
      if (!isRecord(tool)) return [];
      const name = isRecord(tool.function) ? asString(tool.function.name) : asString(tool.name);
      return name ? [name] : [];
    }),
  );
  const tools = asArray(chat.tools).filter(
    (tool) => isRecord(tool) && isRecord(tool.function) && names.has(String(tool.function.name)),
  ) as NonNullable<ChatCompletionRequest["tools"]>;
  const out: ChatCompletionRequest = { ...chat };
  if (tools.length === 0) {
    delete out.tools;
    delete out.tool_choice;
    delete out.parallel_tool_calls;
    return out;
  }
  out.tools = tools;
  out.tool_choice = allowed.mode === "required" ? "required" : "auto";
  return out;
}
