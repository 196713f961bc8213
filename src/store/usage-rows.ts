import { microToIdr } from "./money.js";
import { readLoggedEndpoint } from "./request-source.js";
import type { RecentRequest, RequestLogRow } from "./types.js";

/** A request_log row as the usage endpoints show it (both backends). */
export function recentRequest(row: RequestLogRow): RecentRequest {
  return {
    id: row.id,
    created_at: new Date(row.created_at).toISOString(),
    ...readLoggedEndpoint(row.endpoint),
    model: row.model,
    state: row.state,
    status: row.status,
    error_code: row.error_code,
    stream: row.stream === 1,
    payment: row.payment,
    input_tokens: row.input_tokens,
    output_tokens: row.output_tokens,
    cost_idr: microToIdr(row.cost_micro),
    key_id: row.key_id,
    ...(row.tools_omitted ? { tools_omitted: JSON.parse(row.tools_omitted) as string[] } : {}),
  };
}

/** The start of the fixed window of a free model's token budget running at `now`. */
export function freeTokenWindowStart(windowSeconds: number, now: number): number {
  return Math.floor(now / (windowSeconds * 1000)) * windowSeconds * 1000;
}
