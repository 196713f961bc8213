import type { ClientStyle } from "../completion-types.js";
import { asArray, asString, isRecord } from "./shared.js";

/**
 * A `tool_choice` that names a tool the request does not declare, as a sentence for the client in
 * its API's words, or undefined. OpenAI's and Anthropic's APIs refuse such a request; the other
 * wires would answer it without the call it forces (a choice without its tool is dropped) or
 * refuse it in their own terms, so the gateway refuses it before sending anything.
 */
export function undeclaredChoiceSentence(
  style: ClientStyle,
  body: Record<string, unknown>,
): string | undefined {
  const named = chosenToolName(style, body.tool_choice);
  if (named === undefined || declaredToolNames(style, body.tools).has(named)) return undefined;
  const api = style === "messages" ? "Anthropic" : "OpenAI";
  const shown = named.length > 64 ? `${named.slice(0, 64)}...` : named;
  return `\`tool_choice\` names the tool \`${shown}\`, which is not among the request's \`tools\`; ${api} refuses the request. Declare it in \`tools\`, or name one that is.`;
}

/** The names of the tools a request declares, in its style's shape. */
function declaredToolNames(style: ClientStyle, tools: unknown): Set<string> {
  const names = new Set<string>();
  for (const tool of asArray(tools)) {
    if (!isRecord(tool)) continue;
    const own = style === "chat" ? chatToolName(tool) : asString(tool.name);
    if (own !== undefined) names.add(own);
    // A Responses namespace's functions are chosen by their own names.
    if (style === "responses")
      for (const inner of declaredToolNames(style, tool.tools)) names.add(inner);
  }
  return names;
}

/** A chat tool's name under its type (`{type: "function", function: {name}}`, `custom`'s too). */
function chatToolName(tool: Record<string, unknown>): string | undefined {
  const inner = tool[String(tool.type)];
  return isRecord(inner) ? asString(inner.name) : undefined;
}

/**
 * The tool a `tool_choice` names: chat's `{type: "function" | "custom", [type]: {name}}`,
 * Responses' `{type: "function" | "custom", name}`, messages' `{type: "tool", name}`.
 */
function chosenToolName(style: ClientStyle, choice: unknown): string | undefined {
  if (!isRecord(choice)) return undefined;
  if (style === "chat")
    return choice.type === "function" || choice.type === "custom"
      ? chatToolName(choice)
      : undefined;
  const named = style === "messages" ? ["tool"] : ["function", "custom"];
  return named.includes(String(choice.type)) ? asString(choice.name) : undefined;
}
