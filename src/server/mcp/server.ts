import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
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
  "generate_video start jobs that get_job follows. A refusal (balance, limits, a model for " +
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
 * `tools/call` with its params unchecked, as the handler is registered: the protocol layer parses
 * a request with the schema it was registered with before anything else, and a failure there is
 * answered as an internal error (-32603); the server's own check of `CallToolRequestSchema`, which
 * runs next, answers the client's mistake as what it is, Invalid params (-32602).
 */
const toolsCall = z.object({ method: z.literal("tools/call"), params: z.unknown().optional() });

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
   * that id (on a later POST: this server is stateless) abandons; `done` when the call ended.
   */
  forCall?: (requestId: string | number) => { caller: ToolCaller; done(): void },
  /**
   * How often a call whose request carries a `progressToken` is told it is still running (a
   * `notifications/progress`), so a client that resets its request timeout on progress keeps
   * waiting; 0 sends none (an answer in JSON has nowhere to put them).
   */
  progressEveryMs = 0,
): McpServer {
  const mcp = new McpServer(
    { name: "model-gateway", title: "Model Gateway", version: packageVersion },
    { capabilities: { tools: {} }, instructions },
  );
  mcp.server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  mcp.server.setRequestHandler(toolsCall, async (unchecked, extra) => {
    // Checked by the server before this handler runs.
    const request = CallToolRequestSchema.parse(unchecked);
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
