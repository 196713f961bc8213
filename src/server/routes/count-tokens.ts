import type { Context } from "hono";
import { z } from "zod";
import type { Services } from "../compose/services.js";
import { forModality, resolveTarget } from "../dispatch/resolve.js";
import { openResponseTurn } from "../dispatch/response-state.js";
import { readJson } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import { requestHeader } from "../http/request.js";
import type { Attempt, CountTokensRequest } from "../providers/provider.js";
import { providerOf, servesNatively } from "../providers/registry.js";
import type { CompletionRequest } from "../wire/completion-types.js";
import type { ChatCompletionRequest } from "../wire/openai-types.js";
import { toChatRequest, toMessagesRequest } from "../wire/to-provider.js";
import { withoutGatewayReasoning } from "../wire/translate/encrypted-reasoning.js";
import { estimateRequestTokens, estimateTokens } from "../wire/usage.js";
import { messagesBody, responsesInputItem } from "./completions.js";

/** A Messages body without the output limit, which counting does not need. */
const countBody = messagesBody.omit({ max_tokens: true });
type CountBody = z.infer<typeof countBody>;

/**
 * POST /v1/messages/count_tokens: a provider that counts tokens itself counts exactly; any other
 * backend gets our estimate. Not billed; it shares the usage endpoints' budget of 60 a minute.
 */
export function countTokensHandler(services: CountServices): Handler {
  return async (c) => {
    const body = await readJson(c, countBody);
    const beta = requestHeader(c, "anthropic-beta");
    const count = await countOnTarget(c, services, body.model, (attempt, signal) => {
      const counter = providerOf(attempt.provider).countTokens;
      return counter
        ? counter(services, attempt, { body, anthropicBeta: beta, signal })
        : estimatedInputTokens(body);
    });
    return c.json({ input_tokens: count });
  };
}

/** What the Responses API's `input_tokens` takes: a Responses body without its output settings. */
const inputTokensBody = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(responsesInputItem), z.null()]).optional(),
  instructions: z.string().nullish(),
});

/** The fields Anthropic's `/v1/messages/count_tokens` takes from a Messages body. */
const countedFields = ["model", "messages", "system", "tools", "tool_choice", "thinking"] as const;

/**
 * POST /v1/responses/input_tokens (the openai SDK's `responses.inputTokens.count`): the
 * Responses body translated as `/v1/responses` translates it, its `previous_response_id` or
 * `conversation` replayed before its input, then counted as count_tokens counts: exactly by a
 * provider that counts (a `responses_native` one gets the body /v1/responses would send it), else
 * the gateway's estimate. Not billed, nothing stored.
 */
export function responsesInputTokensHandler(services: CountServices): Handler {
  return async (c) => {
    const body = await readJson(c, inputTokensBody);
    const { accountId } = c.get("auth");
    const turn = await openResponseTurn(
      {
        repo: services.repos.responsesState,
        accountId,
        now: services.options.now,
        ttlMs: services.options.responsesTtlMs,
      },
      body,
    );
    // The compaction items the gateway made are counted as the summaries the model is given.
    const opened: CompletionRequest = {
      style: "responses",
      body: turn.body,
      stream: false,
      clientModel: body.model,
      signal: clientGone(c),
      responseTurn: turn.turn,
    };
    services.compactions.openIn(opened);
    const count = await countOnTarget(c, services, body.model, (attempt, signal) => {
      const provider = providerOf(attempt.provider);
      // A provider that speaks the Responses API counts the body as /v1/responses would send it.
      if (provider.countResponsesTokens && servesNatively(attempt.provider, "responses")) {
        const server = { providerId: attempt.provider.id, secret: attempt.credential.secret };
        const native = withoutGatewayReasoning(
          (opened.responseTurn ?? turn.turn).nativeBody(server),
        );
        return provider.countResponsesTokens(services, attempt, { body: native, signal });
      }
      const req: CompletionRequest = {
        style: "responses",
        body: opened.body,
        stream: false,
        clientModel: body.model,
        signal,
      };
      const rewrite = { omittedTools: [] };
      const onward = { customTools: provider.takesCustomTools };
      const counter = provider.countTokens;
      if (!counter) return estimatedChatTokens(toChatRequest(req, attempt, rewrite, onward));
      const messages = toMessagesRequest(req, attempt, rewrite) as Record<string, unknown>;
      // Nothing to send a counter: instructions alone (it wants at least one message).
      if (!Array.isArray(messages.messages) || messages.messages.length === 0)
        return estimatedChatTokens(toChatRequest(req, attempt, rewrite, onward));
      const counted = Object.fromEntries(
        countedFields.filter((f) => messages[f] !== undefined).map((f) => [f, messages[f]]),
      ) as CountTokensRequest["body"];
      return counter(services, attempt, { body: counted, anthropicBeta: undefined, signal });
    });
    return c.json({ object: "response.input_tokens", input_tokens: count });
  };
}

type CountServices = Pick<
  Services,
  "dispatcher" | "http" | "limits" | "mockScript" | "options" | "store" | "repos" | "compactions"
>;

/**
 * The count on the model's backends, tried as a completion's are; it shares the usage endpoints'
 * budget of 60 a minute and is not billed.
 */
async function countOnTarget(
  c: Context<AppEnv>,
  services: CountServices,
  model: string,
  count: (attempt: Attempt, signal: CountTokensRequest["signal"]) => Promise<number> | number,
): Promise<number> {
  const target = forModality(resolveTarget(services.store.getCatalog(), model), "chat");
  const { accountId } = c.get("auth");
  await services.limits.takeUsageRead(accountId, services.options.now());
  const signal = clientGone(c);
  const { result } = await services.dispatcher.dispatchWith(
    target,
    signal,
    { byok: services.store.listByok(accountId), byokOnly: false },
    async (attempt) => ({ value: await count(attempt, signal), streaming: false }),
  );
  return result;
}

/** A chat body's text, tool calls and tools by the gateway's rule of thumb, a few tokens a message. */
function estimatedChatTokens(chat: ChatCompletionRequest): number {
  const { messages, tools } = chat;
  return estimateRequestTokens({ messages, tools }) + 3 * messages.length;
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
