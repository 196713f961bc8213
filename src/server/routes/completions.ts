import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Context } from "hono";
import { type ZodType, z } from "zod";
import { clearTimeout, setTimeout } from "../../host-timers.js";
import type { ModelRow, ProviderRow } from "../../store/types.js";
import {
  admit,
  completionEndpoints,
  deliveryCover,
  type Settlement,
  settleAdmission,
  settleDelivered,
  settleFailed,
  textCompletionEndpoint,
} from "../billing/admission.js";
import { readsInputByReference, worstCaseInputTokens } from "../billing/pricing.js";
import type { Services } from "../compose/services.js";
import { instructionMessages, lastUserMessages, summaryAsk } from "../dispatch/compaction.js";
import { unexpectedStreamError } from "../dispatch/dispatcher.js";
import { forModality, resolveTarget, servedBy, type Target } from "../dispatch/resolve.js";
import { openResponseTurn } from "../dispatch/response-state.js";
import { openThread } from "../dispatch/threads.js";
import {
  accountSuspended,
  badRequest,
  errorBody,
  GatewayError,
  gatewayStopping,
  internalError,
  LateAnswerRefusal,
  suspendedAccountRefusal,
} from "../errors.js";
import { type ParsedBody, readJsonWithSize } from "../http/body.js";
import { answerSent, ClientGone, failureOf } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import { loopbackSource } from "../http/loopback-socket.js";
import { nodeIncoming, nodeOutgoing, requestHeader } from "../http/request.js";
import { requestIdOf } from "../http/request-id.js";
import { traceOf } from "../http/request-trace.js";
import { KeptAlive, sendSse, sseHeaders } from "../http/sse-response.js";
import { markStage } from "../http/stages.js";
import { isBuiltIn, servesNatively, textCompletionsOf } from "../providers/registry.js";
import type { ClientStyle, CompletionRequest } from "../wire/completion-types.js";
import type { ResponsesRequest } from "../wire/responses-types.js";
import { encodeSSE, SSE_DONE } from "../wire/sse.js";
import type { StreamPiece } from "../wire/stream-types.js";
import { answersAsked, outputBound } from "../wire/to-provider.js";
import { streamErrorEvent } from "../wire/translate/errors.js";
import { backgroundWindowRefusal } from "../wire/translate/responses.js";
import {
  chatToTextCompletion,
  textAnswersMade,
  textCompletionRefusal,
  textCompletionToChat,
  textOnlyAsked,
} from "../wire/translate/text-completion.js";
import { toolChoiceRefusal } from "../wire/translate/tool-choice.js";
import { emptyUsage, sumUsage, type Usage } from "../wire/usage.js";
import {
  compactionResponse,
  compactionStream,
  compactTurn,
  plannedCompaction,
  type TurnCompacted,
} from "./responses-turn-compaction.js";

const content = z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]);

export const chatBody = z.looseObject({
  model: z.string().min(1),
  messages: z
    .array(
      z.looseObject({
        role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
        content: content.optional(),
      }),
    )
    .min(1),
  stream: z.boolean().optional(),
  max_tokens: z.number().int().positive().nullish(),
  max_completion_tokens: z.number().int().positive().nullish(),
  // OpenAI's bound: each answer is produced, and held for, in full.
  n: z.number().int().min(1).max(128).nullish(),
});

export const messagesBody = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().positive(),
  messages: z
    .array(
      z.looseObject({
        role: z.enum(["user", "assistant", "system"]),
        content: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]),
      }),
    )
    .min(1),
  system: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]).optional(),
  stream: z.boolean().optional(),
});

/** Parts of a message's content, or of a tool's output: each names its type. */
const responsesParts = z.array(z.looseObject({ type: z.string() }));

/** The item types of OpenAI's Responses input (its `InputItem`) besides the three read here. */
const otherItemTypes = [
  "reasoning",
  "item_reference",
  "file_search_call",
  "web_search_call",
  "computer_call",
  "computer_call_output",
  "tool_search_call",
  "tool_search_output",
  "additional_tools",
  "configuration_update",
  "compaction",
  "compaction_trigger",
  "image_generation_call",
  "code_interpreter_call",
  "local_shell_call",
  "local_shell_call_output",
  "shell_call",
  "shell_call_output",
  "apply_patch_call",
  "apply_patch_call_output",
  "mcp_list_tools",
  "mcp_approval_request",
  "mcp_approval_response",
  "mcp_call",
  "custom_tool_call",
  "custom_tool_call_output",
  "program",
  "program_output",
] as const;

/**
 * One Responses input item, as OpenAI checks it (a conversation's items are the same): a message
 * (`type` may be left out) with its role and content, a function call or its output with what
 * ties them together, or another item of a type the API has. Anything else is refused, as OpenAI
 * refuses it, rather than stored, dropped later or refused by the provider.
 */
/**
 * An item of Responses `input` (or a conversation's items). An item reference may leave out its
 * `type` (the openai SDK's `ResponseInputItem.ItemReference`: `{ id }`): it is read as one.
 */
export const responsesInputItem = z.preprocess(
  (item) => (isTypelessReference(item) ? { type: "item_reference", id: item.id } : item),
  responsesItemShapes(),
);

function isTypelessReference(item: unknown): item is { id: string } {
  if (typeof item !== "object" || item === null) return false;
  const fields = item as Record<string, unknown>;
  return fields.type == null && fields.role === undefined && typeof fields.id === "string";
}

function responsesItemShapes() {
  return z.discriminatedUnion(
    "type",
    [
      z.looseObject({
        type: z.literal("message").optional(),
        role: z.enum(["user", "assistant", "system", "developer"]),
        content: z.union([z.string(), responsesParts]),
      }),
      z.looseObject({
        type: z.literal("function_call"),
        call_id: z.string(),
        name: z.string(),
        arguments: z.string(),
      }),
      z.looseObject({
        type: z.literal("function_call_output"),
        call_id: z.string(),
        output: z.union([z.string(), responsesParts]),
      }),
      z.looseObject({ type: z.enum(otherItemTypes) }),
    ],
    {
      error: (issue) =>
        issue.code === "invalid_union"
          ? `not an item type of the Responses API; expected one of message, function_call, function_call_output, ${otherItemTypes.join(", ")}.`
          : undefined,
    },
  );
}

export const responsesBody = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(responsesInputItem)]),
  instructions: z.string().nullish(),
  stream: z.boolean().optional(),
  max_output_tokens: z.number().int().positive().nullish(),
  // OpenAI's API refuses any other shape; read as a list, a lone string would be taken as none.
  include: z.array(z.string()).nullish(),
});

/**
 * OpenAI's legacy Completions API (the openai SDK's `completions.create`). What chat cannot carry
 * (`suffix`, `echo`, a number of `logprobs`, `best_of` above 1, token ids, several prompts) is
 * read here, and goes only to the models whose provider carries it (`textOnlyAsked`).
 */
export const completionsBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.union([z.string(), z.array(z.union([z.string(), z.number(), z.array(z.number())]))]),
  stream: z.boolean().optional(),
  max_tokens: z.number().int().positive().nullish(),
  // Chat's bound: each answer is produced, and held for, in full.
  n: z.number().int().min(1).max(128).nullish(),
  suffix: z.string().nullish(),
  echo: z.boolean().nullish(),
  logprobs: z.number().int().min(0).nullish(),
  // OpenAI's bound: each candidate is produced, and held for, in full.
  best_of: z.number().int().min(1).max(20).nullish(),
});

const schemas = { chat: chatBody, messages: messagesBody, responses: responsesBody } as const;

type ChatBody = z.infer<typeof chatBody>;

/**
 * An API the route answers through chat: its body read with its own schema and sent on as the
 * chat body `toChat` makes of it (which throws the 400 of what no provider can answer), its
 * answer the chat answer in its own shape, whole (`answer`, given what the request is billed) or
 * streamed (the chat relay writes each chunk in it: `CompletionRequest.textCompletion`). A
 * provider that serves the API itself (`native`) is sent the client's own body instead, and
 * answers in the API's shape. Admitted, held, dispatched, metered and logged as chat is, under its
 * own `endpoint`.
 */
interface ThroughChat {
  schema: ZodType<Record<string, unknown>>;
  endpoint: string;
  toChat(body: Record<string, unknown>): ChatBody;
  /**
   * The target's models that can answer the client's body (those whose provider carries what it
   * asks beyond chat); none is the 400 naming what the first could not carry.
   */
  carriedBy(
    target: Target,
    body: Record<string, unknown>,
    providers: ReadonlyMap<string, ProviderRow>,
  ): Target;
  /** The answers the provider writes for the client's body: what the hold covers. */
  answers(body: Record<string, unknown>): number;
  /** The provider answers in the API's own shape: its answer goes to the client as it is. */
  native(provider: ProviderRow): boolean;
  answer(chat: unknown, billed: Usage): unknown;
}

const textCompletions: ThroughChat = {
  schema: completionsBody,
  endpoint: textCompletionEndpoint,
  toChat(body) {
    const refused = textCompletionRefusal(body);
    if (refused) throw badRequest(refused);
    return textCompletionToChat(body);
  },
  carriedBy(target, body, providers) {
    const asked = textOnlyAsked(body);
    if (asked.length === 0) return target;
    const carried = (model: ModelRow) => {
      const provider = providers.get(model.provider_id);
      return provider ? textCompletionsOf(provider) : [];
    };
    const models = target.models.filter((model) => {
      const fields = carried(model);
      return fields === "native" || asked.every((ask) => fields.includes(ask.field));
    });
    if (models.length === 0) {
      const fields = carried(target.models[0]);
      const missing = asked.find((ask) => fields !== "native" && !fields.includes(ask.field));
      throw badRequest((missing ?? asked[0]).refusal(target.name));
    }
    return models.length === target.models.length ? target : { ...target, models };
  },
  answers: textAnswersMade,
  native: (provider) => textCompletionsOf(provider) === "native",
  answer: chatToTextCompletion,
};

/** A body answered through chat: its chat body as `data`, and the client's own as `client`. */
type ThroughChatBody = ParsedBody<ChatBody> & { client: Record<string, unknown> };

/** The body of an API answered through chat, read and validated, with its chat body. */
async function readThroughChat(c: Context<AppEnv>, through: ThroughChat): Promise<ThroughChatBody> {
  const parsed = await readJsonWithSize(c, through.schema);
  return { ...parsed, data: through.toChat(parsed.data), client: parsed.data };
}

/**
 * POST /v1/completions: the legacy Completions API, answered through chat, or by the provider's
 * own Completions API where it serves one.
 */
export const textCompletionHandler = (services: Services): Handler =>
  completionHandler(services, "chat", textCompletions);

/**
 * POST /v1/chat/completions, /v1/messages and /v1/responses: one request of any of the three
 * text styles (and, `through` chat, /v1/completions). It writes its answer (JSON or a stream) to
 * the Node response itself, which saves Hono's Response object on the hot path; it reads like the
 * request's path through the gateway.
 */
export function completionHandler(
  services: Services,
  style: ClientStyle,
  through?: ThroughChat,
): Handler {
  const endpoint = through?.endpoint ?? completionEndpoints[style];
  return async (c) => {
    const incoming = nodeIncoming(c);
    const outgoing = nodeOutgoing(c);
    if (!incoming || !outgoing) throw internalError();
    const { key } = c.get("auth");
    const trace = traceOf(incoming);
    const read = through
      ? await readThroughChat(c, through)
      : await readJsonWithSize(c, schemas[style]);
    const { data: body, bytes, text, shape, raw } = read;
    // A legacy completion's own body, where `body` is its chat translation.
    const client = through ? (read as ThroughChatBody).client : undefined;
    markStage(incoming, "parsed");
    if (trace) trace.model = body.model;
    const catalog = services.store.getCatalog();
    const providers = catalog.providers;
    const resolved = forModality(resolveTarget(catalog, body.model), "chat");
    const target = through && client ? through.carriedBy(resolved, client, providers) : resolved;
    const stream = body.stream === true;
    const viaRoute = target.isRoute;
    const nativeFor = (m: ModelRow) => {
      const provider = providers.get(m.provider_id);
      return provider && servesNatively(provider, style);
    };
    if (body.mock_response !== undefined)
      mockResponseAllowed(body.mock_response, target, providers);
    const threaded =
      style === "messages" && body.thread !== undefined
        ? await openThread(
            services.repos.threads,
            catalog,
            key.account_id,
            body,
            target,
            services.options.now,
          )
        : undefined;
    const turn =
      style === "responses"
        ? await openResponseTurn(
            {
              repo: services.repos.responsesState,
              accountId: key.account_id,
              now: services.options.now,
              ttlMs: services.options.responsesTtlMs,
            },
            body,
          )
        : undefined;
    const signal = new ClientGone(outgoing);
    // A turn the gateway compacts before its model answers (`context_management`, a
    // `compaction_trigger`), on a target no provider of which compacts it itself.
    const compaction = turn
      ? plannedCompaction(services, target, providers, turn, signal)
      : undefined;
    // The input the provider is sent: the client's body, and what a thread or a Responses turn
    // puts in with it; input it fetches by reference is bounded by the context window only.
    const sentBytes = bytes + (turn?.replayedBytes ?? 0) + (threaded?.replayedBytes ?? 0);
    const sentBody = threaded?.body ?? turn?.body ?? body;
    const byReference = readsInputByReference(
      sentBody,
      sentBody === body ? shape.referenceKey : undefined,
    );

    // Chat's `n` (its schema bounds it), a legacy completion's candidates; the other styles have
    // one answer. An `n` in a messages or Responses body is no field of theirs and asks for no
    // more: read, a negative one made the hold negative, and a fraction held less than one answer.
    const answers =
      through && client
        ? through.answers(client)
        : style === "chat"
          ? answersAsked(body as { n?: unknown })
          : 1;
    const admission = await admit(services, {
      key,
      target,
      endpoint,
      accountRpm: true,
      worstCase: (m) => {
        const input = byReference ? m.context_window : worstCaseInputTokens(sentBytes, m);
        const output = answers * outputBound(style, body, m, nativeFor(m), viaRoute);
        if (!compaction) return { inputTokens: input, outputTokens: output, units: 0 };
        // Both calls: the summarizing one (the conversation and the ask, the summary), then the
        // answer, whose input is at most the turn's own and the summary.
        const summarizing = worstCaseInputTokens(sentBytes + summaryAsk.length, m);
        if (compaction.kind === "trigger")
          return { inputTokens: summarizing, outputTokens: m.max_output_tokens, units: 0 };
        return {
          inputTokens: summarizing + input + m.max_output_tokens,
          outputTokens: m.max_output_tokens + output,
          units: 0,
        };
      },
      stream,
      signal,
      trace,
      requestId: requestIdOf(outgoing),
      source: loopbackSource(incoming),
    });
    markStage(incoming, "admitted");
    const req: CompletionRequest = {
      style,
      body: sentBody,
      // A body answered through chat is not the client's text: only a provider that serves the
      // client's own API is sent that as written.
      rawBody: { data: client ?? body, raw, text, shape },
      stream,
      clientModel: body.model,
      signal,
      anthropicBeta: requestHeader(c, "anthropic-beta"),
      viaRoute,
      thread: threaded?.thread,
      responseTurn: turn?.turn,
      textCompletion: client,
    };
    // A stream ends when its account is suspended, or a stopping serve cuts it; the gateway's
    // reason is the signal's, which the client's error event carries.
    const unwatch = stream
      ? allOf(
          services.suspensions.watch(key.account_id, () => signal.cut(accountSuspended())),
          services.streamsCut.add(async () => {
            signal.cut(gatewayStopping());
            await answerSent(outgoing);
          }),
        )
      : undefined;
    const cutBy = () => (signal.reason instanceof GatewayError ? signal.reason : undefined);
    const fail = (err: unknown) => {
      unwatch?.();
      return settleFailed(services, admission, failureOf(signal, err));
    };

    // What the client's own API refuses, refused on every wire alike and logged free as a
    // provider's refusal is, before anything is sent; a provider that holds a message thread holds
    // its tools too, and judges its choice.
    const refused =
      (sentBody.thread == null ? toolChoiceRefusal(style, sentBody) : undefined) ??
      (style === "responses" ? backgroundWindowRefusal(body) : undefined);
    if (refused) throw await fail(new GatewayError(400, "invalid_request_error", refused));
    if (trace) trace.steps = [];
    const compactFor = (conversation: unknown[]) =>
      compactTurn(
        services,
        target,
        admission,
        {
          model: body.model,
          accountId: key.account_id,
          conversation,
          instructions: sentBody.instructions,
        },
        signal,
        trace?.steps,
      );
    if (compaction?.kind === "trigger" && turn) {
      let compacted: TurnCompacted;
      try {
        compacted = await compactFor(compaction.conversation);
      } catch (err) {
        throw await fail(err);
      }
      unwatch?.();
      const response = compactionResponse(sentBody, body.model, compacted, services.options.now());
      await turn.turn.record(response, null);
      const { attempt } = compacted;
      await settleDelivered(services, admission, {
        status: 200,
        usage: compacted.usage,
        units: undefined,
        model: attempt.model,
        providerId: attempt.provider.id,
        byokServed: attempt.credential.source === "byok",
      });
      const text = stream ? compactionStream(response) : JSON.stringify(response);
      outgoing.writeHead(200, {
        ...(stream ? sseHeaders : { "content-type": "application/json" }),
        "content-length": Buffer.byteLength(text),
        ...(admission.rateHeaders ?? {}),
      });
      outgoing.end(text);
      return RESPONSE_ALREADY_SENT;
    }
    // A compacted turn is billed both calls, on its one row.
    let compactionUsage: Usage | undefined;
    const withCompaction = (usage: Usage) =>
      compactionUsage ? sumUsage(compactionUsage, usage) : usage;
    const dispatchAnswer = () =>
      services.dispatcher.dispatch(servedBy(target, admission), req, {
        byok: admission.byok,
        byokOnly: admission.byokOnly,
        steps: trace?.steps,
        budgetSpent: admission.budgetSpent,
      });
    // The model answers with the summary in place of the conversation, after the client's system
    // and developer messages (instructions, not conversation), and the turn's own request after
    // it; its answer lists the compaction first. Compacting is part of the dispatch, which a
    // stream's keepalive comments cover.
    const compactThenAnswer = async (conversation: unknown[]) => {
      const compacted = await compactFor(conversation);
      compactionUsage = compacted.usage;
      req.compacted = { item: compacted.item, usage: compacted.usage };
      req.body = {
        ...sentBody,
        input: [
          ...instructionMessages(conversation),
          compacted.item,
          ...lastUserMessages(conversation),
        ],
      };
      return dispatchAnswer();
    };
    const dispatching =
      compaction?.kind === "threshold"
        ? compactThenAnswer(compaction.conversation)
        : dispatchAnswer();
    const headers = admission.rateHeaders ?? {};
    let outcome: Awaited<typeof dispatching> | undefined;
    try {
      // A keepalive interval of 0 sends none (as the other timers' 0 means none), rather than a
      // comment every millisecond.
      outcome =
        stream && services.options.keepaliveMs > 0
          ? await within(dispatching, services.options.keepaliveMs)
          : await dispatching;
    } catch (err) {
      const error = await fail(err);
      // Nothing was sent yet: refused as the key check refuses the next request.
      if (error.code === "account_suspended") throw suspendedAccountRefusal();
      throw error;
    }
    // A stream with nothing to send after the keepalive interval: commit the 200 and keep the
    // client waiting with comments while the dispatcher still tries every step.
    let keptAlive: KeptAlive | undefined;
    if (outcome === undefined) {
      keptAlive = new KeptAlive(outgoing, headers, services.options.keepaliveMs);
      try {
        outcome = await dispatching;
      } catch (err) {
        keptAlive.fail(failureEvent(req, await fail(err)));
        return RESPONSE_ALREADY_SENT;
      }
    }
    markStage(incoming, "dispatched");
    // No attempt sends the body again: a stream's closures keep `req` for minutes, not its bytes.
    req.rawBody = undefined;
    const { result, attempt } = outcome;
    // The answer in the client's API, where the provider did not answer in it itself.
    const shaped = through && !through.native(attempt.provider) ? through : undefined;
    // One literal with every field (a spread that adds fields is V8's slow path on Node 20).
    const settlement = (usage: Usage, delivered: boolean, errorCode?: string): Settlement => ({
      status: 200,
      usage: withCompaction(usage),
      units: undefined,
      model: attempt.model,
      providerId: attempt.provider.id,
      delivered,
      byokServed: attempt.credential.source === "byok",
      errorCode,
      toolsOmitted: result.omittedTools,
    });
    // Tools left out of the request the backend got are named in the answer's headers (unless a
    // stream kept alive already sent its headers).
    const answerHeaders = result.omittedTools
      ? { ...headers, "x-gateway-tools-omitted": result.omittedTools.join(", ") }
      : headers;

    if (result.kind === "json") {
      unwatch?.();
      const recorded = settleDelivered(services, admission, settlement(result.usage, true));
      // Serialized while the settlement commits; it leaves only once committed.
      const text = shaped
        ? JSON.stringify(shaped.answer(result.body, result.usage))
        : (result.text ?? JSON.stringify(result.body));
      await recorded;
      markStage(incoming, "settled");
      outgoing.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(text),
        ...answerHeaders,
      });
      outgoing.end(text);
      markStage(incoming, "sent");
      return RESPONSE_ALREADY_SENT;
    }

    // A stream answered through chat is in the client's API already: the chat relay made each
    // chunk in its shape (`CompletionRequest.textCompletion`).
    sendSse(
      outgoing,
      {
        first: result.first,
        pieces: result.pieces,
        headers: answerHeaders,
        errorEvent: (err) => {
          // A suspension cut the stream: its reason, not the upstream's.
          const cut = cutBy();
          const error = cut ?? (err instanceof GatewayError ? err : undefined);
          const code = error?.code ?? "upstream_error";
          const message = cut ? cut.message : streamErrorMessage(err);
          // What the stream is charged: what it delivered; nothing when the storage refused its
          // record (the message says so); what its mark was charged when the account could not
          // pay the rest of a stream the reaper charged by it. Every piece made before the break
          // was written.
          const billed =
            error instanceof LateAnswerRefusal
              ? error.charged
              : storageRefused(error) !== undefined
                ? emptyUsage()
                : withCompaction(result.meter.billedAhead());
          if (result.errorEvent) return result.errorEvent(message, code, billed);
          return cut ? failureEvent(req, cut) : streamErrorEvent(style, message, { code });
        },
        isClosingEvent: closingEvents[style],
        beforePiece: deliveryCover(services, admission, result.meter, (covered) =>
          settlement(covered, true),
        ),
        tally: result.meter,
        recorded: () => services.ledger.committed(admission.reservation),
        onEnd: (end) => {
          unwatch?.();
          if (end.error) unexpectedStreamError(end.error, signal, attempt, "after its first piece");
          const cut = cutBy();
          // The storage refused a delivery mark: the client was told nothing was charged.
          const refused = storageRefused(end.error);
          attempt.credential.release(end.error && !cut && !refused ? "failed" : "ok");
          settleAdmission(
            services,
            admission,
            settlement(
              result.meter.billed(),
              end.delivered && !refused,
              cut
                ? cut.code
                : refused
                  ? refused.code
                  : end.error
                    ? "upstream_error"
                    : end.cancelled
                      ? "client_closed"
                      : undefined,
            ),
          );
        },
      },
      keptAlive,
    );
    return RESPONSE_ALREADY_SENT;
  };
}

/**
 * LiteLLM's `mock_response` (a string: the answer's text) is honoured by mock models only: a real
 * provider would be sent it, and refuse it or bill a real answer.
 */
function mockResponseAllowed(
  value: unknown,
  target: Target,
  providers: ReadonlyMap<string, ProviderRow>,
): void {
  if (typeof value !== "string")
    throw badRequest("mock_response must be a string: the text the mock model answers with.");
  const real = target.models.find((m) => {
    const provider = providers.get(m.provider_id);
    return !provider || !isBuiltIn(provider);
  });
  if (real)
    throw badRequest(
      `mock_response is answered by mock models only; "${real.name}" is served by a real provider.`,
    );
}

/** `promise`'s value if it settles within `ms`, else undefined (it keeps running). */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** The last event of a stream whose 200 went out before every step failed, in the route's style. */
function failureEvent(req: CompletionRequest, error: GatewayError): string {
  const { style } = req;
  if (style === "responses")
    return streamErrorEvent(style, error.message, {
      code: error.code,
      request: req.body as ResponsesRequest,
      model: req.clientModel,
    });
  return encodeSSE(errorBody(error, style), style === "messages" ? "error" : undefined);
}

const closingEvents: Record<ClientStyle, (piece: StreamPiece) => boolean> = {
  chat: (piece) => piece === SSE_DONE,
  messages: (piece) => typeof piece === "string" && piece.startsWith("event: message_stop\n"),
  // A response cut short (max_output_tokens, a content filter) ends with response.incomplete,
  // as final to its client as response.completed.
  responses: (piece) =>
    typeof piece === "string" &&
    (piece.startsWith("event: response.completed\n") ||
      piece.startsWith("event: response.incomplete\n")),
};

/** The error that ended a stream when it is the storage refusing its charge's record. */
function storageRefused(err: unknown): GatewayError | undefined {
  return err instanceof GatewayError && err.code === "storage_unavailable" ? err : undefined;
}

function streamErrorMessage(err: unknown): string {
  if (err instanceof GatewayError) return err.message;
  return "The upstream stream broke before the answer was complete; send the request again.";
}

/** One call that runs each of `undo`. */
function allOf(...undo: (() => void)[]): () => void {
  return () => {
    for (const each of undo) each();
  };
}
