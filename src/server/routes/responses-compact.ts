import { z } from "zod";
import { admit, settleDelivered, settleFailed } from "../billing/admission.js";
import { worstCaseInputTokens } from "../billing/pricing.js";
import type { Services } from "../compose/services.js";
import { keptUserMessages, summaryAsk } from "../dispatch/compaction.js";
import { forModality, resolveTarget, servedBy } from "../dispatch/resolve.js";
import { openResponseTurn } from "../dispatch/response-state.js";
import { badRequest, internalError, providerFailed } from "../errors.js";
import { readJsonWithSize } from "../http/body.js";
import { clientGone, failureOf } from "../http/client-signal.js";
import type { Handler } from "../http/context.js";
import { loopbackSource } from "../http/loopback-socket.js";
import { nodeIncoming, nodeOutgoing, requestTrace } from "../http/request.js";
import { requestIdOf } from "../http/request-id.js";
import { servesNatively } from "../providers/registry.js";
import type { CompletionRequest } from "../wire/completion-types.js";
import { responsesUsage } from "../wire/translate/responses.js";
import { asArray, randomId } from "../wire/translate/shared.js";
import { responsesInputItem } from "./completions.js";
import { summarizingBody, summaryText } from "./responses-turn-compaction.js";

/** What a compaction is logged and billed as; it shares the account's per-minute limit. */
export const compactEndpoint = "responses.compact";

/** The openai SDK's ResponseCompactParams: the conversation is `input`, a chain, or both. */
const compactBody = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(responsesInputItem)]).nullish(),
  instructions: z.string().nullish(),
  previous_response_id: z.string().nullish(),
});

/**
 * POST /v1/responses/compact (the openai SDK's `responses.compact`), on every model. A
 * `responses_native` provider compacts the conversation itself: it gets the client's body (the
 * chain it names as that provider holds it, or replayed), and its CompactedResponse goes back with
 * the gateway's id. Any other model is asked for a summary of the conversation (`input` after the
 * chain of `previous_response_id`, as a Responses turn would send it), and the answer is OpenAI's
 * shape: the conversation's user messages, then one `compaction` item holding the summary sealed
 * (`dispatch/compaction.ts`), which any model is given as text when the item comes back. Admitted,
 * held, billed by the call's usage and logged as `responses.compact`.
 */
export function compactHandler(services: Services): Handler {
  return async (c) => {
    const { data: body, bytes } = await readJsonWithSize(c, compactBody);
    if (body.input == null && body.previous_response_id == null)
      throw badRequest(
        "A compaction needs the conversation: give its items as `input`, or the response it ends with as `previous_response_id` (or both).",
      );
    const { key } = c.get("auth");
    const trace = requestTrace(c);
    if (trace) trace.model = body.model;
    const target = forModality(resolveTarget(services.store.getCatalog(), body.model), "chat");
    const {
      body: replayed,
      turn,
      replayedBytes,
    } = await openResponseTurn(
      {
        repo: services.repos.responsesState,
        accountId: key.account_id,
        now: services.options.now,
        ttlMs: services.options.responsesTtlMs,
      },
      body,
    );
    const conversation =
      typeof replayed.input === "string"
        ? [{ role: "user", content: replayed.input }]
        : asArray(replayed.input);
    const summarizing = summarizingBody(body.model, conversation, body.instructions);
    const signal = clientGone(c);
    const admission = await admit(services, {
      key,
      target,
      endpoint: compactEndpoint,
      accountRpm: true,
      worstCase: (m) => ({
        inputTokens: worstCaseInputTokens(bytes + replayedBytes + summaryAsk.length, m),
        outputTokens: m.max_output_tokens,
        units: 0,
      }),
      stream: false,
      signal,
      trace,
      requestId: requestIdOf(nodeOutgoing(c)),
      source: loopbackSource(nodeIncoming(c)),
    });
    const req: CompletionRequest = {
      style: "responses",
      body: summarizing,
      stream: false,
      clientModel: body.model,
      signal,
      viaRoute: target.isRoute,
      compaction: { accountId: key.account_id, nativeBody: (server) => turn.nativeBody(server) },
    };
    if (trace) trace.steps = [];
    let served: Awaited<ReturnType<typeof services.dispatcher.dispatch>>;
    try {
      served = await services.dispatcher.dispatch(servedBy(target, admission), req, {
        byok: admission.byok,
        byokOnly: admission.byokOnly,
        steps: trace?.steps,
        budgetSpent: admission.budgetSpent,
      });
      if (served.result.kind !== "json") throw internalError();
    } catch (err) {
      throw await settleFailed(services, admission, failureOf(signal, err));
    }
    const { result, attempt } = served;
    const native = servesNatively(attempt.provider, "responses");
    const summary = native ? "" : summaryText(result.body);
    // A model that wrote no summary would have the conversation forgotten without a word: a
    // provider failure, and free, as an answer without its picture is.
    if (!native && summary.trim() === "")
      throw await settleFailed(services, admission, providerFailed());
    const created = Math.floor(services.options.now() / 1000);
    const answer = native
      ? { ...(result.body as Record<string, unknown>), id: randomId("resp_") }
      : {
          id: randomId("resp_"),
          object: "response.compaction",
          created_at: created,
          output: [
            ...keptUserMessages(conversation),
            {
              id: randomId("cmp_"),
              type: "compaction",
              encrypted_content: services.compactions.seal(key.account_id, summary),
            },
          ],
          usage: responsesUsage(result.usage, result.usage.reasoning_tokens ?? 0),
        };
    await settleDelivered(services, admission, {
      status: 200,
      usage: result.usage,
      model: attempt.model,
      providerId: attempt.provider.id,
      byokServed: attempt.credential.source === "byok",
    });
    return c.json(answer, 200, { ...admission.rateHeaders });
  };
}
