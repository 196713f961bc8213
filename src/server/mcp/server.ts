import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  CallToolRequestSchema,
  CancelledNotificationSchema,
  ErrorCode,
  InitializeRequestSchema,
  isJSONRPCRequest,
  type JSONRPCErrorResponse,
  type JSONRPCMessage,
  ListToolsRequestSchema,
  McpError,
  PingRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { clearInterval, setInterval } from "../../host-timers.js";
import { packageVersion } from "../../version.js";
import {
  type GatewayTool,
  gatewayTools,
  refusalOutput,
  runTool,
  type ToolCaller,
} from "./tools.js";

const instructions =
  "Model Gateway: the gateway's own models as tools, on the same key and account as its /v1 API. " +
  "Use list_models to see which models exist and what they cost; chat for a reply from another " +
  "model; generate_image, generate_speech and transcribe_audio for media; generate_music and " +
  "generate_video start jobs that get_job follows; list_jobs finds them again. A refusal (balance, limits, a model for " +
  "subscribers only) comes back as a tool error naming the gateway's error code.";

/** Each tool as `tools/list` shows it: the input schema as JSON Schema, built once. */
const listed = gatewayTools.map((tool) => ({
  name: tool.name,
  title: tool.title,
  description: tool.description,
  inputSchema: jsonSchema(tool.input),
  ...(tool.output ? { outputSchema: jsonSchema(z.union([tool.output, refusalOutput])) } : {}),
}));
const byName = new Map<string, GatewayTool>(gatewayTools.map((tool) => [tool.name, tool]));

/**
 * The spec's schema of each request this server answers. The SDK's protocol layer parses a
 * request with its handler's schema before the handler runs and answers a failure as an internal
 * error (-32603), where the mistake is the client's: Invalid params (-32602)
 * (modelcontextprotocol/typescript-sdk#2284). So each request is checked against its schema
 * first, by `connectCheckingParams`, and one that fails is answered -32602 naming the field.
 */
const requestSchemas = new Map<string, { safeParse(request: unknown): ParamsCheck }>([
  ["initialize", InitializeRequestSchema],
  ["ping", PingRequestSchema],
  ["tools/list", ListToolsRequestSchema],
  ["tools/call", CallToolRequestSchema],
]);

type ParamsCheck =
  | { success: true }
  | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } };

/**
 * Connects the server to its transport with every request's params checked before the SDK sees
 * it (`requestSchemas`): a request that fails its schema is answered Invalid params (-32602) on
 * the transport, and the rest of a batch goes on as usual. A request's `task` (MCP 2025-11-25's
 * task augmentation) is dropped: this server declares no `tasks` capability, and the spec has
 * such a receiver process the request normally, where the SDK would refuse it as an internal
 * error (-32603).
 */
export async function connectCheckingParams(mcp: McpServer, transport: Transport): Promise<void> {
  await mcp.connect(transport);
  const dispatch = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const refusal = invalidParams(message);
    // The transport answers it as any response; a failure to is the transport's to report.
    if (refusal) transport.send(refusal).catch(() => {});
    else dispatch?.(withoutTask(message), extra);
  };
}

/** `message` without the `task` of its params, when it is a request that has one. */
function withoutTask(message: JSONRPCMessage): JSONRPCMessage {
  if (!isJSONRPCRequest(message) || message.params?.task === undefined) return message;
  const { task: _, ...params } = message.params;
  return { ...message, params };
}

/** The Invalid params answer to a request its method's schema refuses, else undefined. */
function invalidParams(message: JSONRPCMessage): JSONRPCErrorResponse | undefined {
  if (!isJSONRPCRequest(message)) return undefined;
  const checked = requestSchemas.get(message.method)?.safeParse(message);
  if (checked === undefined || checked.success) return undefined;
  const issue = checked.error.issues[0];
  const where = issue?.path.length ? issue.path.map(String).join(".") : "params";
  return {
    jsonrpc: "2.0",
    id: message.id,
    error: {
      code: ErrorCode.InvalidParams,
      message: `Invalid params for ${message.method}: ${where}: ${issue?.message ?? "invalid"}`,
    },
  };
}

function jsonSchema(schema: z.ZodType): { type: "object"; [field: string]: unknown } {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: "input" }) as Record<
    string,
    unknown
  >;
  return { ...rest, type: "object" };
}

/**
 * The SDK's server with the gateway's tools, for one caller. The tools are set on the protocol
 * server beneath `McpServer` rather than registered with it: its `registerTool` answers an
 * unknown tool or arguments that fail their schema with an `isError` result, where this server
 * answers them as the protocol errors they are (-32602), so a client sees a mistake of its own
 * apart from a refusal of the gateway.
 */
export function gatewayMcpServer(
  caller: ToolCaller,
  /**
   * The caller for one `tools/call`, by its JSON-RPC id, which a `notifications/cancelled` naming
   * that id (on any POST: this server is stateless) abandons; `done` when the call ended.
   */
  forCall?: (requestId: string | number) => { caller: ToolCaller; done(): void },
  /**
   * How often a call whose request carries a `progressToken` is told it is still running (a
   * `notifications/progress`), so a client that resets its request timeout on progress keeps
   * waiting; 0 sends none (an answer in JSON has nowhere to put them).
   */
  progressEveryMs = 0,
  /**
   * A `notifications/cancelled` naming a call by its JSON-RPC id, which may be running on another
   * POST (this server is stateless). Called only for a message the transport accepted: a POST it
   * refuses (a protocol version it does not speak, an `Accept` without SSE) cancels nothing.
   */
  onCancelled?: (requestId: string | number) => void,
): McpServer {
  const mcp = new McpServer(
    { name: "model-gateway", title: "Model Gateway", version: packageVersion },
    { capabilities: { tools: {} }, instructions },
  );
  mcp.server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  // The route ends the call a cancellation names, whichever POST it came on (`onCancelled`). The
  // SDK's own handler would, for a call of the same POST, drop the call's answer and leave the
  // POST's answer waiting for it, with the call still running. The SDK runs a notification's
  // handler a step before a request's, so a batch's cancellation reaches the route before the
  // call it names registers, whichever comes first in the batch: the call is not run.
  mcp.server.setNotificationHandler(CancelledNotificationSchema, (notification) => {
    const requestId = notification.params.requestId;
    if (requestId !== undefined) onCancelled?.(requestId);
  });
  mcp.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = byName.get(request.params.name);
    if (!tool) {
      throw new McpError(
        ErrorCode.InvalidParams,
        `Unknown tool "${request.params.name}"; tools/list names the ${listed.length} tools.`,
      );
    }
    const parsed = tool.input.safeParse(request.params.arguments ?? {});
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue?.path.length ? issue.path.join(".") : "arguments";
      throw new McpError(
        ErrorCode.InvalidParams,
        `Invalid arguments for ${tool.name}: ${where}: ${issue?.message ?? "invalid"}`,
      );
    }
    const call = forCall?.(extra.requestId);
    const progressToken = extra._meta?.progressToken;
    const stopProgress =
      progressToken !== undefined && progressEveryMs > 0
        ? reportProgress(tool.name, progressEveryMs, extra.signal, (progress) =>
            extra.sendNotification({
              method: "notifications/progress",
              params: { progressToken, ...progress },
            }),
          )
        : undefined;
    try {
      return await runTool(tool, parsed.data, call?.caller ?? caller);
    } finally {
      stopProgress?.();
      call?.done();
    }
  });
  return mcp;
}

/**
 * Tells the client every `everyMs` that a call is still running, until the returned stop is
 * called or the server gives up the request (`ended`). The /v1 request a call is served as
 * answers whole, so there is no share of the work done to report: `progress` counts the reports
 * (it must grow), without a `total`.
 */
function reportProgress(
  toolName: string,
  everyMs: number,
  ended: AbortSignal,
  send: (progress: { progress: number; message: string }) => Promise<void>,
): () => void {
  let reports = 0;
  const timer = setInterval(() => {
    reports++;
    // The client may have left between two reports: that ends the call, not the server.
    send({ progress: reports, message: `${toolName} is still running` }).catch(() => {});
  }, everyMs);
  const stop = () => {
    clearInterval(timer);
    ended.removeEventListener("abort", stop);
  };
  ended.addEventListener("abort", stop, { once: true });
  return stop;
}
