// What the test kit's request list shows, apart from the inspector: the published types reach no
// store or server internals through it.

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
  model: string | null;
  provider: string | null;
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
