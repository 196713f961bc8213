import { channel } from "node:diagnostics_channel";
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import { performanceNow } from "../../host-timers.js";
import type { RequestSource } from "../../store/request-source.js";
import { loopbackSource } from "./loopback-socket.js";
import { requestIdOf } from "./request-id.js";
import { targetPath } from "./target.js";

/**
 * One message per finished HTTP request, on a diagnostics channel: `gateway serve` prints a line
 * from it and `/metrics` counts it. While nobody subscribes, a request pays one property read in
 * the listener and one in each route that could say more (`traceOf` finds nothing).
 */
export const requestChannelName = "model-gateway:request:finished";
const finishedChannel = channel(requestChannelName);

/** What the routes learn about a request on its way; every field may stay unknown. */
export interface RequestTrace {
  model?: string;
  /** The label of the key that made the request, never the key. */
  keyLabel?: string;
  stream?: boolean;
  costMicro?: number;
  inputTokens?: number;
  outputTokens?: number;
  providerId?: string | null;
  /** The model that served the request (a route's step). */
  servedModel?: string | null;
  /** The error code the request ended with, also after a 200 (a stream that broke). */
  errorCode?: string;
  /** Tools the backend could not run, left out of the request it was sent. */
  toolsOmitted?: string[];
  /** Milliseconds of the gateway's clock a free request waited for its burst slot. */
  burstWaitMs?: number;
  /** Each attempt of a route or credential chain and how it ended (`mock-flaky 503`, `mock-gpt ok`). */
  steps?: string[];
  /** `mcp` for the /v1 request a tool call of the MCP server was served as. */
  via?: RequestSource;
}

export interface FinishedRequest extends RequestTrace {
  /** The id the answer carried (`x-request-id`), also the request log's id of an admitted request. */
  requestId: string | undefined;
  /** The base URL of the gateway that served it (one process may run several). */
  gateway: string;
  method: string;
  /** The path without its query string (which may carry a one-time token). */
  path: string;
  status: number;
  durationMs: number;
  /** Epoch milliseconds. */
  finishedAt: number;
  /** The client went away before the response was complete. */
  aborted: boolean;
}

/** Where the listener finds the gateway's URL, known only once the server listens. */
export interface TraceSource {
  url: string;
}

/** Kept beside the request, not on it: a new property would change the shape of every request. */
const traces = new WeakMap<IncomingMessage, FinishedRequest>();

/** The request's trace while someone listens, else undefined. */
export function traceOf(incoming: IncomingMessage | undefined): RequestTrace | undefined {
  return incoming && finishedChannel.hasSubscribers ? traces.get(incoming) : undefined;
}

/** The server's listener: `inner`, with every request traced while someone listens. */
export function tracedListener(source: TraceSource, inner: RequestListener): RequestListener {
  return (incoming, outgoing) => {
    if (finishedChannel.hasSubscribers) traceRequest(source, incoming, outgoing);
    inner(incoming, outgoing);
  };
}

function traceRequest(
  source: TraceSource,
  incoming: IncomingMessage,
  outgoing: ServerResponse,
): void {
  const started = performanceNow();
  const trace = newTrace(source, incoming.method ?? "", loopbackSource(incoming));
  traces.set(incoming, trace);
  outgoing.once("close", () => {
    if (!finishedChannel.hasSubscribers) return;
    trace.path = targetPath(incoming.url ?? "");
    trace.status = outgoing.statusCode;
    // A refusal no stage named (a page, a transport's own answer) still says what it was.
    if (trace.errorCode === undefined && trace.status >= 400)
      trace.errorCode = statusCode(trace.status);
    trace.durationMs = performanceNow() - started;
    trace.finishedAt = Date.now();
    trace.aborted = !outgoing.writableFinished;
    trace.requestId = requestIdOf(outgoing);
    finishedChannel.publish(trace);
  });
}

/** Every field from the start, so every trace has one shape and is itself the message. */
function newTrace(source: TraceSource, method: string, via: RequestSource | undefined) {
  const trace: FinishedRequest = {
    gateway: source.url,
    requestId: undefined,
    method,
    path: "",
    status: 0,
    durationMs: 0,
    finishedAt: 0,
    aborted: false,
    model: undefined,
    keyLabel: undefined,
    stream: undefined,
    costMicro: undefined,
    inputTokens: undefined,
    outputTokens: undefined,
    providerId: undefined,
    servedModel: undefined,
    errorCode: undefined,
    toolsOmitted: undefined,
    burstWaitMs: undefined,
    steps: undefined,
    via,
  };
  return trace;
}

/** The code of a refusal that named none: its status (`http_405`). */
export function statusCode(status: number): string {
  return `http_${status}`;
}

/**
 * The line of an answer the server wrote on a connection before Node made a request of it (a
 * request line or headers it could not parse, a CONNECT): what of the request line could be read.
 */
export function publishUnparsed(
  source: TraceSource,
  answered: { requestId: string; method: string; target: string; status: number; code: string },
): void {
  if (!finishedChannel.hasSubscribers) return;
  const trace = newTrace(source, answered.method, undefined);
  trace.requestId = answered.requestId;
  trace.path = targetPath(answered.target);
  trace.status = answered.status;
  trace.errorCode = answered.code;
  trace.finishedAt = Date.now();
  finishedChannel.publish(trace);
}

/** Subscribes `listener` to the requests of the gateway at `url`; returns the unsubscribe. */
export function onFinishedRequests(
  source: TraceSource,
  listener: (request: FinishedRequest) => void,
): () => void {
  const handler = (message: unknown) => {
    const request = message as FinishedRequest;
    if (request.gateway === source.url) listener(request);
  };
  finishedChannel.subscribe(handler);
  return () => finishedChannel.unsubscribe(handler);
}
