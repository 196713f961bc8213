import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { allStreamEvents } from "./sse.js";

/** An official SDK client connected to the gateway at `baseUrl`'s /mcp with `key`. */
export async function mcpClient(
  baseUrl: string,
  key: string,
  name: string,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name, version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

/**
 * The JSON-RPC messages of an answer of POST /mcp as a client reads them, whichever way the
 * server answered: in JSON (one message, or a batch's array), or as SSE (a tool call's answer
 * to a client that takes `text/event-stream`: its notifications, then its response).
 */
export async function mcpMessages<T = Record<string, unknown>>(res: Response): Promise<T[]> {
  if (res.headers.get("content-type")?.startsWith("text/event-stream")) {
    return (await allStreamEvents<T>(res)).flatMap((event) =>
      event.data === "[DONE]" ? [] : [event.data],
    );
  }
  const body = (await res.json()) as T | T[];
  return Array.isArray(body) ? body : [body];
}

/** The JSON-RPC responses of an answer of POST /mcp, without the notifications SSE carries. */
export async function mcpResponses<T = Record<string, unknown>>(res: Response): Promise<T[]> {
  return (await mcpMessages<T & { method?: unknown }>(res)).filter(
    (message) => message.method === undefined,
  );
}

/** The one JSON-RPC response of an answer of POST /mcp to a single request. */
export async function mcpResponse<T = Record<string, unknown>>(res: Response): Promise<T> {
  const [response, ...more] = await mcpResponses<T>(res);
  if (!response || more.length > 0)
    throw new Error(`expected one JSON-RPC response, got ${more.length + (response ? 1 : 0)}`);
  return response;
}
