/**
 * The test kit's public types, in a module that imports nothing: the published declarations
 * (src/index.ts) reach them without reaching the server's internals.
 */

/** A body as the inspector shows it: JSON parsed, text as text, anything else described. */
export type CapturedBody = unknown;

export interface UpstreamExchange {
  provider: string;
  /** The path under the provider's base URL (`/chat/completions`). */
  path: string;
  body: CapturedBody;
  /** What the provider answered: its status, and its body (a stream as its text). */
  status?: number;
  answer?: CapturedBody;
}

export interface InspectedRequest {
  id: string;
  /** ISO time the request was admitted. */
  time: string;
  finished_at: string | null;
  endpoint: string;
  /** `mcp` for a tool call of the gateway's MCP server (absent for a request made to /v1). */
  via?: "mcp";
  model: string | null;
  provider: string | null;
  /** The model that served it: a route's step (the route's name is `model`); null when none did. */
  served_model: string | null;
  status: number | null;
  error_code: string | null;
  state: string;
  stream: boolean;
  account: string;
  key: { id: string | null; label: string | null };
  payment: string;
  cost_micro: number;
  cost_idr: number;
  usage: { input_tokens: number; output_tokens: number };
  /** Tools the backend could not run, left out of the request it was sent (absent when none). */
  tools_omitted?: string[];
  /** The music or video job the request queued (absent for any other request). */
  job_id?: string;
  /** With captureBodies: the client's body as the gateway received it. */
  received?: CapturedBody;
  /** With captureBodies: each upstream attempt, in order. */
  upstream?: UpstreamExchange[];
  /** With captureBodies: what the client was answered (a stream as its text). */
  answer?: { status: number | undefined; body: CapturedBody };
}

export interface RequestsQuery {
  limit?: number;
  model?: string;
  status?: number;
}

export type CassetteMode = "record" | "replay" | "record-missing";

export interface CassetteOptions {
  /** The directory of cassette files (created when recording). */
  dir: string;
  /** `record` calls providers and saves every exchange; `replay` never calls one; `record-missing` replays what it has and records the rest. */
  mode: CassetteMode;
  /** `recorded` replays the recorded waits (time to answer, gaps between chunks); `none` (default) answers at once. */
  timing?: "recorded" | "none";
}
