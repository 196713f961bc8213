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
  return async (c) => {
    const body = await readBody(c);
    const key = presentedKey(c) ?? "";
    const clientAddress = clientIp(c, services.options.trustedProxies);
    const host = requestHeader(c, "host");
    const signal = clientGone(c);
    const caller: ToolCaller = {
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
    };
    const headers = new Headers();
    for (const name of transportHeaders) {
      const value = requestHeader(c, name);
      if (value !== undefined) headers.set(name, value);
    }
    const server = gatewayMcpServer(caller);
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
