/**
 * Where a request came from besides the model API itself: `mcp` for a tool call of the gateway's
 * MCP server, which the gateway serves as the /v1 request it stands for. The request log keeps it
 * as a prefix of the endpoint's name (`mcp:images.generations`), so both backends record it with
 * the statements that already write the row; the listings show it as its own field.
 */
export type RequestSource = "mcp";

const separator = ":";

/** The endpoint name a request is logged under. */
export function loggedEndpoint(endpoint: string, source: RequestSource | undefined): string {
  return source === undefined ? endpoint : `${source}${separator}${endpoint}`;
}

/** A logged endpoint name read back: the endpoint, and the source when it had one. */
export function readLoggedEndpoint(logged: string): { endpoint: string; via?: RequestSource } {
  const at = logged.indexOf(separator);
  if (at === -1) return { endpoint: logged };
  const source = logged.slice(0, at);
  return source === "mcp" ? { endpoint: logged.slice(at + 1), via: source } : { endpoint: logged };
}
