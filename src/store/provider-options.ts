import type { ProviderRow } from "./types.js";

/** What a provider's config row keeps in `options_json` besides its columns (config/apply.ts). */
export interface ProviderOptions {
  cooldown_ms?: number;
  unsupported_tools?: "omit" | "reject";
  max_tokens_field?: "max_tokens" | "max_completion_tokens";
  prompt_cache_breakpoints?: boolean;
  idle_timeout_ms?: number;
  max_stream_ms?: number;
  max_event_bytes?: number;
  /** POST /v1/completions goes to the provider's own Completions API. */
  completions_native?: boolean;
  /** False: a stream's body asks for no usage (`stream_options`), which the server refuses. */
  stream_usage?: boolean;
  mock?: Record<string, unknown>;
}

const optionsOfRow = new WeakMap<Pick<ProviderRow, "options_json">, ProviderOptions>();

/**
 * A provider row's options, parsed once per row (a config apply makes new rows), not on every
 * request that reads one of them. Callers only read what it returns.
 */
export function providerOptions(provider: Pick<ProviderRow, "options_json">): ProviderOptions {
  let options = optionsOfRow.get(provider);
  if (!options) {
    options = JSON.parse(provider.options_json) as ProviderOptions;
    optionsOfRow.set(provider, options);
  }
  return options;
}
