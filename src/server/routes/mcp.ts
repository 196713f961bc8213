import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import {
  ErrorCode,
  McpError,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "@modelcontextprotocol/sdk/types.js";
import type { Context } from "hono";
import { presentedKey } from "../auth/guards.js";
import type { Services } from "../compose/services.js";
import {
  accountSuspended,
  errorBody,
  errorHeaders,
  GatewayError,
  PlainTextError,
} from "../errors.js";
import { readBody } from "../http/body.js";
import { answerSent, clientGone } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import type { Loopback, LoopbackAnswer } from "../http/loopback.js";
import {
  clientIp,
  gatewayUrl,
  nodeOutgoing,
  requestHeader,
  requestTrace,
} from "../http/request.js";
import { sharedKeyIpRefusal } from "../limits/shared-key.js";
import { CancellableCalls } from "../mcp/cancellable-calls.js";
import { connectCheckingParams, gatewayMcpServer } from "../mcp/server.js";
import type { ToolCaller } from "../mcp/tools.js";
import type { GoneSignal } from "../time/gone-signal.js";

/** The request headers the MCP transport reads; nothing else of the caller's is passed on. */
const transportHeaders = ["accept", "content-type", "mcp-protocol-version", "mcp-session-id"];

/**
 * POST /mcp: the MCP Streamable HTTP transport, stateless (every POST is answered on its own),
 * with the gateway's models as tools (`mcp/tools.ts`). The route's access check has already
 * authenticated the caller as /v1 does and counted a shared key's request against its address's
 * limit; each tool call then goes through the gateway's own listener (the loopback) as the /v1
 * request it stands for, with the caller's key and address.
 *
 * A POST with a tool call is answered as SSE when the client takes it (an SDK client always
 * does): a call may take longer than an edge lets a response stay silent, or than the client's
 * request timeout, so the stream carries keepalive comments at the gateway's keepalive interval
 * and, for a request with a `progressToken`, `notifications/progress` as often. Anything else is
 * answered in JSON, at once.
 */
export function mcpHandler(services: Services, loopback: Loopback): Handler {
  const calls = new CancellableCalls(services.options.now, callCancelled);
  return async (c) => {
    const body = await readBody(c);
    const key = presentedKey(c) ?? "";
    const clientAddress = clientIp(c, services.options.trustedProxies);
    const { id: keyId, account_id: accountId, kind } = c.get("auth").key;
    // Who may cancel this POST's calls: the same key from the same address.
    const canceller = `${keyId}\u0000${clientAddress}`;
    const host = requestHeader(c, "host");
    const shared = kind === "shared";
    const { draining } = services.closing;
    const messages = messagesOf(body, shared || draining);
    // A gateway that drains takes no new work; a POST of notifications alone (the cancellation
    // of a call it is still running) is still heard.
    if (draining && requestsIn(messages) > 0) return shuttingDown(c);
    if (messages?.batch) {
      const refused = refusedBatch(c, messages.parsed);
      if (refused) return refused;
    }
    // A shared key's address counts the requests of the POST, each a piece of work; a POST of
    // notifications alone (the cancellation of a call, above all) is let through at the limit,
    // and a POST refused whole counts nothing.
    const counted = shared ? requestsIn(messages) : 0;
    const countedAt = services.options.now();
    if (
      counted > 0 &&
      !(await services.sharedKeys.admitIpRequests(keyId, clientAddress, counted, countedAt))
    )
      throw sharedKeyIpRefusal();
    const gone = clientGone(c);
    const callerWith = (signal: GoneSignal): ToolCaller => ({
      send: async (request) => {
        try {
          return await loopback.send({
            method: request.method,
            path: request.path,
            headers: {
              authorization: `Bearer ${key}`,
              ...(host ? { host } : {}),
              ...(request.contentType ? { "content-type": request.contentType } : {}),
            },
            body: request.body,
            clientAddress,
            source: "mcp",
            signal,
          });
        } catch (err) {
          // A call the gateway ended (it is closing) tells the client why.
          if (signal.aborted && signal.reason instanceof McpError) throw signal.reason;
          // One the gateway cut (the account was suspended) is refused as the /v1 route says so.
          if (signal.aborted && signal.reason instanceof GatewayError)
            return refusalAnswer(signal.reason);
          throw err;
        }
      },
      link: (path) => gatewayUrl(c, services.options, path),
      storedFile: async (id) => {
        const file = await services.repos.files.find(id, accountId);
        return file && { contentType: file.content_type, bytes: file.bytes };
      },
    });
    const caller = callerWith(gone);
    // The calls of this POST in flight, which the gateway's close ends.
    const running = new Set<AbortController>();
    const forCall = (requestId: string | number) => {
      const controller = new AbortController();
      const leave = () => controller.abort(gone.reason);
      if (gone.aborted) leave();
      else gone.addEventListener("abort", leave, { once: true });
      const release = calls.add(canceller, requestId, controller);
      // A call ends when its account is suspended, as a /v1 stream does (the call's SSE answer is
      // one): its /v1 twin ends as cut by the gateway, charged what it delivered.
      const unwatch = services.suspensions.watch(accountId, () =>
        controller.abort(accountSuspended()),
      );
      running.add(controller);
      return {
        caller: callerWith(controller.signal),
        done: () => {
          gone.removeEventListener("abort", leave);
          release();
          unwatch();
          running.delete(controller);
        },
      };
    };
    const headers = new Headers();
    for (const name of transportHeaders) {
      const value = requestHeader(c, name);
      if (value !== undefined) headers.set(name, value);
    }
    // The transport's own test of the header (it refuses a client that does not take both).
    const streamed =
      (requestHeader(c, "accept")?.includes("text/event-stream") ?? false) &&
      (messages?.parsed ?? []).some(isToolCall);
    const { keepaliveMs } = services.options;
    // A notifications/cancelled names a call another POST of this caller is running (or is about
    // to: kept a while for it): end it as a /v1 client that leaves ends its request (nothing
    // delivered, nothing charged).
    const server = gatewayMcpServer(caller, forCall, streamed ? keepaliveMs : 0, (requestId) =>
      calls.cancel(canceller, requestId),
    );
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: !streamed,
      // The comments `--keepalive-ms` sets for /v1 streams (0: none, as the SDK takes it too).
      keepAliveMs: keepaliveMs,
      // The route's own body limit was applied by the reader above.
      maxRequestBodySize: Math.max(1, body.length),
    });
    await connectCheckingParams(server, transport);
    let streaming = false;
    try {
      const answer = await transport.handleRequest(
        new Request(c.req.url, { method: "POST", headers, body: new Uint8Array(body) }),
      );
      if (answer.status >= 400) {
        // The transport refused the POST whole (its headers, a body that is no JSON-RPC): nothing
        // of it ran.
        if (counted > 0)
          await services.sharedKeys.giveBackIp(keyId, clientAddress, counted, countedAt);
        refusedWith(c, answer.status);
      }
      if (!answer.body || !answer.headers.get("content-type")?.startsWith("text/event-stream"))
        return answer;
      // The server lives as long as its stream: until the transport ends it after the last
      // answer, or the client hangs up (the call itself ends by `gone`). A close of the gateway
      // ends the calls first, so that each is answered: an SDK client does not fail a call
      // whose stream was cut, it waits for its request timeout.
      streaming = true;
      const unregister = services.closing.add(() => {
        for (const controller of running) controller.abort(gatewayClosing());
        return sent(c);
      });
      return new Response(
        endingWith(answer.body, () => {
          unregister();
          return server.close();
        }),
        { status: answer.status, headers: answer.headers },
      );
    } finally {
      if (!streaming) await server.close();
    }
  };
}

/**
 * The answer of a /v1 route that refuses with `error` (in its JSON style), for a call the gateway
 * cut while its /v1 twin ran: the tool turns it into its refusal result, naming the code.
 */
function refusalAnswer(error: GatewayError): LoopbackAnswer {
  return {
    status: error.status,
    headers: { "content-type": "application/json", ...errorHeaders(error) },
    body: Buffer.from(JSON.stringify(errorBody(error, "chat"))),
  };
}

/**
 * The error a call the client cancelled is answered, ended or never started: an SDK client no
 * longer waits for it, but the POST's answer ends only once each of its requests has one.
 */
function callCancelled(): McpError {
  return new McpError(
    ErrorCode.ConnectionClosed,
    "The client cancelled this call (notifications/cancelled): it was ended before its answer, as a client that leaves ends its /v1 request.",
  );
}

/** The error a call in flight is answered when the gateway closes. */
function gatewayClosing(): McpError {
  return new McpError(
    ErrorCode.ConnectionClosed,
    "The gateway is shutting down: this call was ended before its answer, as a client that leaves ends its /v1 request. Try it again.",
  );
}

/**
 * The answer to a POST with requests while the gateway drains: none of them ran, and its client
 * may send them again, to this gateway once it is back or to another.
 */
function shuttingDown(c: Context): Response {
  return c.json(
    {
      jsonrpc: "2.0",
      error: {
        code: ErrorCode.ConnectionClosed,
        message:
          "The gateway is shutting down: this request was not run. Try it again in a moment.",
      },
      id: null,
    },
    503,
  );
}

/** Resolves once the response has gone to the client, or its connection closed. */
async function sent(c: Context): Promise<void> {
  const outgoing = nodeOutgoing(c);
  if (outgoing) await answerSent(outgoing);
}

/** Whether a JSON-RPC message is a `tools/call` request (one with an id, to be answered). */
function isToolCall(message: unknown): boolean {
  const request = message as { method?: unknown; id?: unknown } | null;
  return request?.method === "tools/call" && request.id !== undefined && request.id !== null;
}

/** `body` as it is, with `end` called once when it ended or its reader cancelled it. */
function endingWith(
  body: ReadableStream<Uint8Array>,
  end: () => Promise<void>,
): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let ended = false;
  const finish = () => {
    if (ended) return;
    ended = true;
    void end().catch(() => {});
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          controller.close();
          finish();
        } else controller.enqueue(value);
      } catch (err) {
        finish();
        controller.error(err);
      }
    },
    async cancel(reason) {
      try {
        await reader.cancel(reason);
      } finally {
        finish();
      }
    },
  });
}

/**
 * GET and DELETE /mcp: a stateless server has no stream to open and no session to end. A 405, as
 * the MCP transport asks; its `Allow` is the registration's (`methodsTaken`).
 */
export const mcpMethodNotAllowed: Handler = () => {
  throw new PlainTextError(
    405,
    "this MCP server is stateless: send each JSON-RPC message as a POST",
    "method_not_allowed",
  );
};

/**
 * The JSON-RPC messages of a POST's body, parsed here only when there is something to look at:
 * a batch, a `tools/call` (answered as SSE), or `always` (a shared key's, whose requests are
 * counted). Read as the transport reads it (a BOM dropped), which answers a body that is no JSON
 * itself.
 */
function messagesOf(
  body: Uint8Array,
  always: boolean,
): { batch: boolean; parsed: unknown[] } | undefined {
  const batch = startsAnArray(body);
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (!always && !batch && !bytes.includes("tools/call")) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return undefined;
  }
  return Array.isArray(parsed) ? { batch: true, parsed } : { batch: false, parsed: [parsed] };
}

/** Whether a JSON text is an array: its first byte after a BOM and whitespace is `[`. */
function startsAnArray(body: Uint8Array): boolean {
  let at = body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  while (body[at] === 0x20 || body[at] === 0x09 || body[at] === 0x0a || body[at] === 0x0d) at++;
  return body[at] === 0x5b;
}

/** MCP 2025-06-18 took JSON-RPC batches out of the protocol; the versions before have them. */
const firstVersionWithoutBatches = "2025-06-18";

/**
 * The requests among a POST's messages: those with a method and an id, which the server answers
 * and which may run a tool. Notifications (no id) and a client's responses carry no work.
 */
function requestsIn(messages: { parsed: unknown[] } | undefined): number {
  let requests = 0;
  for (const message of messages?.parsed ?? []) {
    const request = message as { method?: unknown; id?: unknown } | null;
    if (typeof request?.method === "string" && request.id !== undefined) requests++;
  }
  return requests;
}

/**
 * The answer to a batch the transport must not run, or undefined to run it: a client of a
 * version without batches; two requests under one id, which would both run (and be charged)
 * with one answer between them.
 */
function refusedBatch(c: Context<AppEnv>, messages: unknown[]): Response | undefined {
  // A version the SDK does not know is the transport's to refuse.
  const version = requestHeader(c, "mcp-protocol-version");
  if (
    version !== undefined &&
    SUPPORTED_PROTOCOL_VERSIONS.includes(version) &&
    version >= firstVersionWithoutBatches
  ) {
    return invalidRequest(
      c,
      `MCP ${version} has no JSON-RPC batches (none since ${firstVersionWithoutBatches}): send each message as a POST of its own.`,
    );
  }
  const ids = new Set<string>();
  for (const message of messages) {
    const request = message as { method?: unknown; id?: unknown } | null;
    if (typeof request?.method !== "string" || request.id === undefined) continue;
    const id = JSON.stringify(request.id);
    if (ids.has(id))
      return invalidRequest(c, `Two requests of the batch have the id ${id}; each needs its own.`);
    ids.add(id);
  }
  return undefined;
}

/**
 * The code on serve's line of a POST refused whole, as every other refusal's line names one:
 * `bad_request` for a 400 (a body that is no JSON-RPC, a protocol version the transport does not
 * speak, a batch it must not run); for the transport's refusals of the POST's headers, what its
 * JSON-RPC error says ("Not Acceptable: Client must accept both application/json and
 * text/event-stream", "Unsupported Media Type: Content-Type must be application/json").
 */
const refusalCodes: Readonly<Record<number, string>> = {
  400: "bad_request",
  406: "not_acceptable",
  415: "unsupported_media_type",
};

function refusedWith(c: Context, status: number): void {
  const trace = requestTrace(c);
  const code = refusalCodes[status];
  if (trace && trace.errorCode === undefined && code) trace.errorCode = code;
}

/** A JSON-RPC Invalid Request answered before the transport, in the shape the transport uses. */
function invalidRequest(c: Context, message: string): Response {
  refusedWith(c, 400);
  return c.json(
    { jsonrpc: "2.0", error: { code: ErrorCode.InvalidRequest, message }, id: null },
    400,
  );
}
