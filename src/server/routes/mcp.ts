import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { presentedKey } from "../auth/guards.js";
import type { Services } from "../compose/services.js";
import { readBody } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { Handler } from "../http/context.js";
import type { Loopback } from "../http/loopback.js";
import { clientIp, gatewayUrl, requestHeader } from "../http/request.js";
import { gatewayMcpServer } from "../mcp/server.js";
import type { ToolCaller } from "../mcp/tools.js";
import type { GoneSignal } from "../time/gone-signal.js";

/** The request headers the MCP transport reads; nothing else of the caller's is passed on. */
const transportHeaders = ["accept", "content-type", "mcp-protocol-version", "mcp-session-id"];

/**
 * POST /mcp: the MCP Streamable HTTP transport, stateless (every POST is answered on its own, in
 * JSON), with the gateway's models as tools (`mcp/tools.ts`). The route's access check has
 * already authenticated the caller as /v1 does and counted a shared key's request against its
 * address's limit; each tool call then goes through the gateway's own listener (the loopback) as
 * the /v1 request it stands for, with the caller's key and address.
 */
export function mcpHandler(services: Services, loopback: Loopback): Handler {
  const calls = new CancellableCalls();
  return async (c) => {
    const body = await readBody(c);
    const key = presentedKey(c) ?? "";
    const clientAddress = clientIp(c, services.options.trustedProxies);
    const host = requestHeader(c, "host");
    const gone = clientGone(c);
    // A notifications/cancelled names a call another POST of this caller is running: end it as a
    // /v1 client that leaves ends its request (nothing delivered, nothing charged).
    for (const requestId of cancelledIds(body))
      calls.cancel(callIdentity(key, clientAddress, requestId));
    const callerWith = (signal: GoneSignal): ToolCaller => ({
      send: (request) =>
        loopback.send({
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
        }),
      link: (path) => gatewayUrl(c, services.options, path),
    });
    const caller = callerWith(gone);
    const forCall = (requestId: string | number) => {
      const controller = new AbortController();
      const leave = () => controller.abort(gone.reason);
      if (gone.aborted) leave();
      else gone.addEventListener("abort", leave, { once: true });
      const release = calls.add(callIdentity(key, clientAddress, requestId), controller);
      return {
        caller: callerWith(controller.signal),
        done: () => {
          gone.removeEventListener("abort", leave);
          release();
        },
      };
    };
    const headers = new Headers();
    for (const name of transportHeaders) {
      const value = requestHeader(c, name);
      if (value !== undefined) headers.set(name, value);
    }
    const server = gatewayMcpServer(caller, forCall);
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
      // The route's own body limit was applied by the reader above.
      maxRequestBodySize: Math.max(1, body.length),
    });
    await server.connect(transport);
    try {
      return await transport.handleRequest(
        new Request(c.req.url, { method: "POST", headers, body: new Uint8Array(body) }),
      );
    } finally {
      await server.close();
    }
  };
}

/** GET and DELETE /mcp: a stateless server has no stream to open and no session to end. */
export const mcpMethodNotAllowed: Handler = (c) =>
  c.text("this MCP server is stateless: send each JSON-RPC message as a POST\n", 405, {
    allow: "POST, OPTIONS",
  });

/** Who may cancel a call: the same key from the same address, naming the call's JSON-RPC id. */
function callIdentity(key: string, address: string, requestId: unknown): string {
  return `${key}\u0000${address}\u0000${JSON.stringify(requestId)}`;
}

/** The request ids the `notifications/cancelled` messages of a POST's body name. */
function cancelledIds(body: Uint8Array): unknown[] {
  // The transport parses the body itself: this parse is only for the rare POST that cancels.
  if (
    !Buffer.from(body.buffer, body.byteOffset, body.byteLength).includes("notifications/cancelled")
  )
    return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(body).toString("utf8"));
  } catch {
    return [];
  }
  const messages = Array.isArray(parsed) ? parsed : [parsed];
  return messages.flatMap((m) => {
    const message = m as { method?: unknown; params?: { requestId?: unknown } } | null;
    if (message?.method !== "notifications/cancelled") return [];
    const id = message.params?.requestId;
    return typeof id === "string" || typeof id === "number" ? [id] : [];
  });
}

/**
 * The tool calls in flight, by who may cancel them. A stateless server has no session to tell
 * two clients on one key and address apart (each numbers its requests from 0): a cancellation
 * that names more than one call in flight is ignored, as MCP lets a receiver do.
 */
class CancellableCalls {
  private readonly inFlight = new Map<string, Set<AbortController>>();

  add(identity: string, controller: AbortController): () => void {
    const set = this.inFlight.get(identity) ?? new Set<AbortController>();
    this.inFlight.set(identity, set);
    set.add(controller);
    return () => {
      set.delete(controller);
      if (set.size === 0 && this.inFlight.get(identity) === set) this.inFlight.delete(identity);
    };
  }

  cancel(identity: string): void {
    const set = this.inFlight.get(identity);
    if (set?.size !== 1) return;
    for (const controller of set)
      controller.abort(new DOMException("cancelled by the client", "AbortError"));
  }
}
