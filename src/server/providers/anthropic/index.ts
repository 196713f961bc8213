import type { Provider } from "../provider.js";
import { anthropicComplete, anthropicCountTokens } from "./messages.js";

/** Anthropic's Messages API (or any API that speaks it): chat and its own token count. */
export const anthropicProvider: Provider = {
  needsBaseUrl: true,
  servesNatively: (style) => style === "messages",
  complete: anthropicComplete,
  countTokens: anthropicCountTokens,
};
