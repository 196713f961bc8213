import type { IncomingMessage, ServerResponse } from "node:http";
import { z } from "zod";
import { admitCaller, keyFromHeaders, nodeClientIp } from "../auth.js";
import { type Admission, admit, settleAdmission, settleDelivered } from "../billing/admission.js";
import type { SettleOptions } from "../billing/ledger.js";
import { worstCaseInputTokens } from "../billing/pricing.js";
import { mapFailure } from "../dispatch/dispatcher.js";
import { forModality, resolveTarget } from "../dispatch/resolve.js";
import { openThread } from "../dispatch/threads.js";
import {
  clientClosed,
  type ErrorStyle,
  errorAnswer,
  errorBody,
  GatewayError,
  internalError,
} from "../errors.js";
import { ClientGone } from "../http/client-signal.js";
import { corsResponseHeaders, sendWithCors } from "../http/cors.js";
import { parseJsonBody, readNodeBody, refuseDeclaredLength } from "../http/json-body.js";
import type { NodeRoute } from "../http/node-listener.js";
import { nodeHeader } from "../http/request-header.js";
import { traceOf } from "../http/request-trace.js";
import { KeptAlive, sendSse } from "../http/sse-response.js";
import { markStage } from "../http/stages.js";
import type { Services } from "../services.js";
import { outputBound, StreamBroken } from "../wire/bridges.js";
import type { ClientStyle, CompletionRequest } from "../wire/completion-types.js";
import { encodeSSE, SSE_DONE } from "../wire/sse.js";
import type { StreamPiece } from "../wire/stream-types.js";
import { streamErrorEvent } from "../wire/translate/errors.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";

const content = z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]);

const chatBody = z.looseObject({
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

const responsesBody = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.looseObject({}))]),
  instructions: z.string().nullish(),
  stream: z.boolean().optional(),
  max_output_tokens: z.number().int().positive().nullish(),
});

const schemas = { chat: chatBody, messages: messagesBody, responses: responsesBody } as const;

/**
 * The three text-completion routes, by path. They are served from Node's request objects rather
 * than through Hono: the router, the middleware chain and the request wrappers cost about
 * 0.03 ms of the gateway's added latency at one connection. Everything else stays on Hono
 * (preflights for these paths included).
 */
export function completionRoutes(s: Services): Map<string, NodeRoute> {
  return new Map([
    ["/v1/chat/completions", completionRoute(s, "chat", "chat.completions")],
    ["/v1/messages", completionRoute(s, "messages", "messages")],
    ["/v1/responses", completionRoute(s, "responses", "responses")],
  ]);
}

function completionRoute(s: Services, style: ClientStyle, endpoint: string): NodeRoute {
  const errorStyle: ErrorStyle = style === "messages" ? "messages" : "chat";
  const route = `POST /v1/${endpoint.replace(".", "/")}`;
  return (incoming, outgoing) => {
    complete(s, style, endpoint, incoming, outgoing).catch((err: unknown) => {
      try {
        // A stream already under way reports its own errors; nothing else can be said here.
        if (outgoing.headersSent) throw err;
        s.ledger.noteStorageFailure(err);
        const answer = errorAnswer(err, errorStyle, route);
        const { "content-type": contentType, ...headers } = answer.headers;
        sendWithCors(outgoing, answer.status, contentType, answer.body, headers);
      } catch {
        outgoing.destroy();
      }
    });
  };
}

/** One request of any of the three text styles; it reads like the request's path through the gateway. */
async function complete(
  s: Services,
  style: ClientStyle,
  endpoint: string,
  incoming: IncomingMessage,
  outgoing: ServerResponse,
): Promise<void> {
  const limit = s.options.bodyLimitBytes;
  // As on every other /v1 route, an oversized declared body is refused before the key is looked at.
  refuseDeclaredLength(nodeHeader(incoming, "content-length"), limit);
  const key = admitCaller(
    s.store,
    s.sharedKeys,
    keyFromHeaders(nodeHeader(incoming, "authorization"), nodeHeader(incoming, "x-api-key")),
    nodeClientIp(incoming),
    s.options.now(),
  );
  markStage(incoming, "authenticated");
  const trace = traceOf(incoming);
  if (trace) trace.keyLabel = key.label;
  const { data: body, bytes } = parseJsonBody(await readNodeBody(incoming, limit), schemas[style]);
  markStage(incoming, "parsed");
  if (trace) trace.model = body.model;
  const target = forModality(resolveTarget(s.store.getCatalog(), body.model), "chat");
  const stream = body.stream === true;
  const viaRoute = target.isRoute;
  const catalog = s.store.getCatalog();
  const providers = catalog.providers;
  const threaded =
    style === "messages" && body.thread !== undefined
      ? await openThread(s.repos.threads, catalog, key.account_id, body, target, s.options.now())
      : undefined;
  const signal = new ClientGone(outgoing);

  const admission = await admit(s, {
    key,
    target,
    endpoint,
    accountRpm: true,
    worstCase: (m) => ({
      inputTokens: worstCaseInputTokens(bytes, m),
      outputTokens: outputBound(style, body, m, providers.get(m.provider_id), viaRoute),
      units: 0,
    }),
    stream,
    signal,
    trace,
  });
  markStage(incoming, "admitted");
  const req: CompletionRequest = {
    style,
    body: threaded?.body ?? body,
    stream,
    clientModel: body.model,
    signal,
    anthropicBeta: nodeHeader(incoming, "anthropic-beta"),
    viaRoute,
    thread: threaded?.thread,
  };
  const fail = (err: unknown) => failAdmission(s, admission, signal.aborted ? clientClosed() : err);

  const dispatching = s.dispatcher.dispatch(target, req, {
    byok: admission.byok,
    byokOnly: admission.byokOnly,
  });
  const headers = admission.rateHeaders ?? {};
  let outcome: Awaited<typeof dispatching> | undefined;
  try {
    outcome = stream ? await within(dispatching, s.options.keepaliveMs) : await dispatching;
  } catch (err) {
    throw fail(err);
  }
  // A stream with nothing to send after the keepalive interval: commit the 200 and keep the client
  // waiting with comments while the dispatcher still tries every step.
  let keptAlive: KeptAlive | undefined;
  if (outcome === undefined) {
    keptAlive = new KeptAlive(
      outgoing,
      { ...corsResponseHeaders, ...headers },
      s.options.keepaliveMs,
    );
    try {
      outcome = await dispatching;
    } catch (err) {
      keptAlive.fail(failureEvent(style, fail(err)));
      return;
    }
  }
  markStage(incoming, "dispatched");
  const { result, attempt } = outcome;
  const served = {
    model: attempt.model,
    providerId: attempt.provider.id,
    byokServed: attempt.credential.source === "byok",
    toolsOmitted: result.omittedTools,
  };
  // Tools left out of the request the backend got are named in the answer's headers (unless a
  // stream kept alive already sent its headers).
  const answerHeaders = result.omittedTools
    ? { ...headers, "x-gateway-tools-omitted": result.omittedTools.join(", ") }
    : headers;

  if (result.kind === "json") {
    await settleDelivered(s, admission, { status: 200, usage: result.usage, ...served });
    markStage(incoming, "settled");
    sendWithCors(outgoing, 200, "application/json", JSON.stringify(result.body), answerHeaders);
    markStage(incoming, "sent");
    return;
  }

  sendSse(
    outgoing,
    {
      first: result.first,
      pieces: result.pieces,
      headers: { ...corsResponseHeaders, ...answerHeaders },
      errorEvent: (err) =>
        streamErrorEvent(style, streamErrorMessage(err), {
          code: err instanceof GatewayError ? err.code : undefined,
        }),
      isClosingEvent: closingEvents[style],
      recorded: () => s.ledger.committed(),
      onEnd: (end) => {
        attempt.credential.release(end.error ? "failed" : "ok");
        settleAdmission(s, admission, {
          status: 200,
          usage: result.usage(),
          delivered: end.delivered,
          errorCode: end.error ? "upstream_error" : end.cancelled ? "client_closed" : undefined,
          ...served,
        });
      },
    },
    keptAlive,
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
function failureEvent(style: ClientStyle, error: GatewayError): string {
  if (style === "responses") return streamErrorEvent(style, error.message, { code: error.code });
  return encodeSSE(errorBody(error, style), style === "messages" ? "error" : undefined);
}

const closingEvents: Record<ClientStyle, (piece: StreamPiece) => boolean> = {
  chat: (piece) => piece === SSE_DONE,
  messages: (piece) => typeof piece === "string" && piece.startsWith("event: message_stop\n"),
  responses: (piece) =>
    typeof piece === "string" && piece.startsWith("event: response.completed\n"),
};

/** Settles a request that produced nothing and returns the error the client should see. */
export function failAdmission(
  s: Services,
  admission: Admission,
  err: unknown,
  options: SettleOptions = {},
): GatewayError {
  const error = toGatewayError(err);
  settleAdmission(
    s,
    admission,
    {
      status: error.status,
      usage: { input_tokens: 0, output_tokens: 0 },
      delivered: false,
      model: undefined,
      providerId: null,
      byokServed: false,
      errorCode: error.code,
    },
    options,
  );
  return error;
}

function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof UpstreamFailure) return mapFailure(err);
  if (err instanceof StreamBroken)
    return new GatewayError(503, "upstream_error", "The provider failed or timed out.");
  return internalError();
}

function streamErrorMessage(err: unknown): string {
  if (err instanceof GatewayError) return err.message;
  return "The upstream stream broke before the answer was complete; send the request again.";
}
