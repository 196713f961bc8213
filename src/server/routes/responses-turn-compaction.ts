import type { ProviderRow } from "../../store/types.js";
import type { Admission } from "../billing/admission.js";
import type { Services } from "../compose/services.js";
import {
  compactionItem,
  conversationOf,
  summaryAsk,
  type TurnCompaction,
  turnCompaction,
} from "../dispatch/compaction.js";
import type { DispatchOptions } from "../dispatch/dispatcher.js";
import { servedBy, type Target } from "../dispatch/resolve.js";
import { internalError, providerFailed } from "../errors.js";
import type { Attempt } from "../providers/provider.js";
import { servesNatively } from "../providers/registry.js";
import type { GoneSignal } from "../time/gone-signal.js";
import type { CompactedTurn, CompletionRequest, ResponseTurn } from "../wire/completion-types.js";
import type { ResponsesOutputItem, ResponsesRequest } from "../wire/responses-types.js";
import { encodeSSE } from "../wire/sse.js";
import { baseResponse, compactionEvents, responsesUsage } from "../wire/translate/responses.js";
import { asArray, isRecord, randomId } from "../wire/translate/shared.js";
import { estimateRequestTokens } from "../wire/usage.js";

/**
 * A Responses turn compacted by the gateway before its model answers, as OpenAI's API compacts
 * one (`context_management` with its `compact_threshold`, or a `compaction_trigger` last in
 * `input`), on every model whose provider has no compaction of its own: the summarizing call of
 * POST /v1/responses/compact, its summary sealed in a `compaction` item that stands for the whole
 * conversation before it (docs/http-api.md).
 */

/** What a model is asked to summarize a conversation: the conversation, then the ask. */
export function summarizingBody(
  model: string,
  conversation: unknown[],
  instructions: unknown,
): Record<string, unknown> {
  return {
    model,
    input: [...conversation, { role: "user", content: summaryAsk }],
    ...(typeof instructions === "string" && instructions ? { instructions } : {}),
  };
}

/** What a Responses turn's own compaction (`context_management`, `compaction_trigger`) made. */
export type TurnCompacted = CompactedTurn & { attempt: Attempt };

/**
 * A Responses turn's compaction, before its model answers: the same summarizing call as POST
 * /v1/responses/compact (one dispatch, under the turn's admission), the summary sealed for the
 * account as the item that stands for everything before it. A model that answers no summary is a
 * provider failure. The caller settles a failure.
 */
export async function compactTurn(
  services: Services,
  target: Target,
  admission: Admission,
  turn: { model: string; accountId: string; conversation: unknown[]; instructions: unknown },
  signal: GoneSignal,
  steps: DispatchOptions["steps"],
): Promise<TurnCompacted> {
  const summarizing = summarizingBody(turn.model, turn.conversation, turn.instructions);
  const req: CompletionRequest = {
    style: "responses",
    body: summarizing,
    stream: false,
    clientModel: turn.model,
    signal,
    viaRoute: target.isRoute,
    compaction: { accountId: turn.accountId, nativeBody: () => summarizing },
  };
  const { result, attempt } = await services.dispatcher.dispatch(servedBy(target, admission), req, {
    byok: admission.byok,
    byokOnly: admission.byokOnly,
    steps,
    budgetSpent: admission.budgetSpent,
  });
  if (result.kind !== "json") throw internalError();
  const summary = summaryText(result.body);
  if (summary.trim() === "") throw providerFailed();
  const item = compactionItem(services.compactions.seal(turn.accountId, summary, true));
  return { item, usage: result.usage, attempt };
}

/** A turn's compaction the gateway makes: what it asked for, and the conversation it summarizes. */
export interface PlannedCompaction {
  kind: TurnCompaction["kind"];
  conversation: unknown[];
}

/**
 * The compaction a Responses turn gets from the gateway, or undefined: none asked, one asked of a
 * target a `responses_native` provider may serve (it compacts the turn itself, sent the body as
 * today), or a threshold the rendered input (the chain's items and the input, with the gateway's
 * compaction items as their summaries) does not pass; such a turn is sent as it was before.
 */
export function plannedCompaction(
  services: Pick<Services, "compactions">,
  target: Target,
  providers: ReadonlyMap<string, ProviderRow>,
  sent: { body: Record<string, unknown>; turn: ResponseTurn },
  signal: GoneSignal,
): PlannedCompaction | undefined {
  const asked = turnCompaction(sent.body);
  if (!asked) return undefined;
  const native = target.models.some((m) => {
    const provider = providers.get(m.provider_id);
    return provider !== undefined && servesNatively(provider, "responses");
  });
  if (native) return undefined;
  const rendered: CompletionRequest = {
    style: "responses",
    body: sent.body,
    stream: false,
    clientModel: target.name,
    signal,
    responseTurn: sent.turn,
  };
  services.compactions.openIn(rendered);
  const conversation = conversationOf(rendered.body.input);
  if (asked.kind === "threshold") {
    const tokens = estimateRequestTokens({
      input: conversation,
      instructions: rendered.body.instructions,
    });
    if (tokens <= asked.threshold) return undefined;
  }
  return { kind: asked.kind, conversation };
}

/**
 * The answer to a turn whose `compaction_trigger` asked only to compact: a Response whose one
 * output item is the compaction, billed the summarizing call (OpenAI's Codex sends the trigger to
 * compact its history, and reads one compaction item back).
 */
export function compactionResponse(
  sent: Record<string, unknown>,
  clientModel: string,
  compacted: CompactedTurn,
  now: number,
): Record<string, unknown> {
  const response = baseResponse(
    sent as ResponsesRequest,
    clientModel,
    randomId("resp_"),
    Math.floor(now / 1000),
  );
  return {
    ...response,
    status: "completed",
    output: [compacted.item],
    usage: responsesUsage(compacted.usage),
  };
}

/** That Response streamed as OpenAI streams a compaction: its lifecycle around the item's events. */
export function compactionStream(response: Record<string, unknown>): string {
  let sequence = 0;
  const emit = (type: string, fields: Record<string, unknown>) => ({
    event: type,
    data: { type, ...fields, sequence_number: sequence++ },
  });
  const started = { ...response, status: "in_progress", output: [], usage: null };
  const item = asArray(response.output)[0] as ResponsesOutputItem;
  const events = [
    emit("response.created", { response: started }),
    emit("response.in_progress", { response: started }),
    ...compactionEvents(item, 0, emit),
    emit("response.completed", { response }),
  ];
  return events.map((ev) => encodeSSE(ev.data, ev.event)).join("");
}

/** The summary a model answered: the text of its answer's messages. */
export function summaryText(response: unknown): string {
  const parts: string[] = [];
  for (const item of asArray(isRecord(response) ? response.output : undefined)) {
    if (!isRecord(item) || item.type !== "message") continue;
    for (const part of asArray(item.content))
      if (isRecord(part) && typeof part.text === "string") parts.push(part.text);
  }
  return parts.join("\n");
}
