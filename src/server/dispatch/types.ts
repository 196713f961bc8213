import type { ModelRow, ProviderRow } from "../../store/types.js";
import type { ErrorCode } from "../errors.js";
import type { GoneSignal } from "../http/client-signal.js";
import type { Usage } from "../wire/usage.js";

export type ClientStyle = "chat" | "messages" | "responses";

export interface CompletionRequest {
  style: ClientStyle;
  /** The client's body, as parsed; adapters map `model` and translate when wires differ. */
  body: Record<string, unknown>;
  stream: boolean;
  clientModel: string;
  signal: GoneSignal;
  /** The client's `anthropic-beta` header: forwarded to anthropic-wire providers (Claude Code relies on it). */
  anthropicBeta?: string;
}

/** A stream is already encoded in the client's style: SSE text, or upstream bytes passed through. */
export type StreamPiece = string | Uint8Array;

export type JsonCompletion = { kind: "json"; body: unknown; usage: Usage };
export type StreamCompletion = {
  kind: "stream";
  pieces: AsyncIterator<StreamPiece>;
  usage(): Usage;
};
export type CompletionResult = JsonCompletion | StreamCompletion;

/** One way to reach a model: a provider, and the credential to use with it. */
export interface Attempt {
  model: ModelRow;
  provider: ProviderRow;
  credential: Credential;
}

export interface Credential {
  source: "pool" | "byok" | "none";
  secret: string | undefined;
  /** Called when the attempt ends, with how the upstream answered, so the pool can cool or free the key. */
  release(outcome: "ok" | "rate_limited" | "failed", retryAfterMs?: number): void;
}

export type FailureKind =
  | "rejected"
  | "rate_limited"
  | "unauthorized"
  | "unavailable"
  | "busy"
  | "unsupported";

/** How one upstream attempt failed; mapped to the spec's errors by the dispatcher. */
export class UpstreamFailure extends Error {
  constructor(
    readonly kind: FailureKind,
    readonly status: number,
    readonly reason: ErrorCode = "upstream_rejected",
    readonly retryAfterMs?: number,
  ) {
    super(`upstream ${kind} (${status})`);
    this.name = "UpstreamFailure";
  }
}

/**
 * The request asks for something this provider's wire cannot carry (`detail` says what); nothing
 * was sent. Inside a route the next backend may carry it.
 */
export class UnsupportedRequest extends UpstreamFailure {
  constructor(readonly detail: string) {
    super("unsupported", 400, "invalid_request_error");
    this.name = "UnsupportedRequest";
  }
}

export interface ProviderAdapter {
  complete(attempt: Attempt, req: CompletionRequest): Promise<CompletionResult>;
}
