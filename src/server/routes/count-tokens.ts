import type { z } from "zod";
import type { Services } from "../compose/services.js";
import { forModality, resolveTarget } from "../dispatch/resolve.js";
import { readJson } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { Handler } from "../http/context.js";
import { requestHeader } from "../http/request.js";
import { providerOf } from "../providers/registry.js";
import { estimateTokens } from "../wire/usage.js";
import { messagesBody } from "./completions.js";

/** A Messages body without the output limit, which counting does not need. */
const countBody = messagesBody.omit({ max_tokens: true });
type CountBody = z.infer<typeof countBody>;

/**
 * POST /v1/messages/count_tokens: a provider that counts tokens itself counts exactly; any other
 * backend gets our estimate. Not billed; it shares the usage endpoints' budget of 60 a minute.
 */
export function countTokensHandler(
  services: Pick<Services, "dispatcher" | "http" | "limits" | "mockScript" | "options" | "store">,
): Handler {
  return async (c) => {
    const body = await readJson(c, countBody);
    const target = forModality(resolveTarget(services.store.getCatalog(), body.model), "chat");
    const { accountId } = c.get("auth");
    await services.limits.takeUsageRead(accountId, services.options.now());
    const signal = clientGone(c);
    const beta = requestHeader(c, "anthropic-beta");
    const { result } = await services.dispatcher.dispatchWith(
      target,
      signal,
      { byok: services.store.listByok(accountId), byokOnly: false },
      async (attempt) => {
        const counter = providerOf(attempt.provider).countTokens;
        return {
          value: counter
            ? await counter(services, attempt, { body, anthropicBeta: beta, signal })
            : estimatedInputTokens(body),
          streaming: false,
        };
      },
    );
    return c.json({ input_tokens: result });
  };
}

/** Text by the gateway's rule of thumb, tool calls and tools by their JSON, a few tokens a message. */
function estimatedInputTokens(body: CountBody): number {
  const text = [blockText(body.system), ...body.messages.map((m) => blockText(m.content))];
  if (body.tools !== undefined) text.push(JSON.stringify(body.tools));
  return estimateTokens(text.join("\n")) + 3 * body.messages.length;
}

function blockText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map(blockText).join("\n");
  if (!content || typeof content !== "object") return "";
  const block = content as { text?: unknown; name?: unknown; input?: unknown; content?: unknown };
  if (typeof block.text === "string") return block.text;
  if (block.input !== undefined)
    return `${String(block.name ?? "")} ${JSON.stringify(block.input)}`;
  return blockText(block.content);
}
