import type { Provider } from "../provider.js";
import { geminiComplete, geminiCountTokens } from "./chat.js";
import { geminiEmbed } from "./embeddings.js";
import { googleKeyRefusal } from "./failures.js";

/**
 * Google's Gemini API (`generateContent`, key in `x-goog-api-key`): chat in every client style,
 * translated both ways, its own token count and embeddings. It speaks no client style itself.
 */
export const geminiProvider: Provider = {
  needsBaseUrl: true,
  servesNatively: () => false,
  classify: googleKeyRefusal,
  complete: geminiComplete,
  countTokens: geminiCountTokens,
  embed: geminiEmbed,
};
