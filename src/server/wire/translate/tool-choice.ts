import type { ClientStyle } from "../completion-types.js";
import type { ResponsesRequest } from "../responses-types.js";
import { withInputSettings } from "./responses.js";
import { asArray, asString, isRecord } from "./shared.js";

/**
 * A `tool_choice` the client's own API refuses, as a sentence for the client in its API's words,
 * or undefined: one naming a tool the request does not declare, and one given without any tools
 * (OpenAI's chat refuses every choice then, its Responses API `required`, Anthropic's any choice
 * but `none`). Every wire is refused alike, before anything is sent: a translated wire would
 * otherwise drop the choice and answer, where the client's own API refuses the request. A
 * Responses body's tools include those its input items declare (`withInputSettings`).
 */
export function toolChoiceRefusal(
  style: ClientStyle,
  body: Record<string, unknown>,
): string | undefined {
  const choice = body.tool_choice;
  if (choice == null) return undefined;
  const read = style === "responses" ? withInputSettings(body as ResponsesRequest) : body;
  const undeclared = undeclaredChoiceSentence(style, read);
  if (undeclared || asArray(read.tools).length > 0) return undeclared;
  if (style === "chat")
    return "`tool_choice` is only allowed when the request declares `tools`; OpenAI refuses it otherwise. Leave it out, or declare the tools.";
  if (style === "responses" && choice === "required")
    return "`tool_choice` `required` needs the request to declare `tools`; OpenAI refuses it otherwise. Leave it out, or declare the tools.";
  if (style === "messages" && !(isRecord(choice) && choice.type === "none"))
    return "`tool_choice` may only be given with `tools` (or as `none`); Anthropic refuses it otherwise. Leave it out, or declare the tools.";
  return undefined;
}

/**
 * A `tool_choice` that names a tool the request does not declare, as a sentence for the client in
 * its API's words, or undefined. OpenAI's and Anthropic's APIs refuse such a request; the other
 * wires would answer it without the call it forces (a choice without its tool is dropped) or
 * refuse it in their own terms, so the gateway refuses it before sending anything.
 */
function undeclaredChoiceSentence(
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
