import type { ModelRow, ProviderRow } from "../../store/types.js";
import type { ErrorCode } from "../errors.js";
import type { GoneSignal } from "../http/client-signal.js";
import type { Usage } from "../wire/usage.js";
import type { MessageThread } from "./threads.js";

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
  /** The client named a route: each step's body is rewritten, and its output limit clamped. */
  viaRoute?: boolean;
  /** The message thread the gateway holds for this request (its body is then the whole conversation). */
  thread?: MessageThread;
}

/** A stream is already encoded in the client's style: SSE text, or upstream bytes passed through. */
export type StreamPiece = string | Uint8Array;

/** `omittedTools`: tools the backend could not run, left out of the request it was sent. */
export type JsonCompletion = { kind: "json"; body: unknown; usage: Usage; omittedTools?: string[] };
export type StreamCompletion = {
  kind: "stream";
  pieces: AsyncIterator<StreamPiece>;
  usage(): Usage;
  omittedTools?: string[];
};
export type CompletionResult = JsonCompletion | StreamCompletion;

/** One way to reach a model: a provider, and the credential to use with it. */
export interface Attempt {
  model: ModelRow;
  provider: ProviderRow;
  credential: Credential;
  /**
   * No later step of a route follows: a tool this backend cannot run is left out here, where an
   * earlier step is skipped so that a later one may run it.
   */
  lastStep?: boolean;
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

/**
 * A provider refused a body forwarded as the client wrote it, whose output limit is above the
 * model's configured maximum: that is most likely why, so the client is told so.
 */
export class OutputLimitRejected extends UpstreamFailure {
  constructor(
    status: number,
    readonly detail: string,
  ) {
    super("rejected", status, "invalid_request_error");
    this.name = "OutputLimitRejected";
  }
}

export interface ProviderAdapter {
  complete(attempt: Attempt, req: CompletionRequest): Promise<CompletionResult>;
}
