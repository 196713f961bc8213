import type { Backend, CompletionRequest, CompletionResult } from "../wire/completion-types.js";

/** One way to reach a model: a provider, and the credential to use with it. */
export interface Attempt extends Backend {
  credential: Credential;
}

export interface Credential {
  source: "pool" | "byok" | "none";
  secret: string | undefined;
  /** Called when the attempt ends, with how the upstream answered, so the pool can cool or free the key. */
  release(outcome: "ok" | "rate_limited" | "failed", retryAfterMs?: number): void;
}

/** What every provider wire implements: one attempt, answered in the client's style. */
export interface ProviderAdapter {
  complete(attempt: Attempt, req: CompletionRequest): Promise<CompletionResult>;
}
