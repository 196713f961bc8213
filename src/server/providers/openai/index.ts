import { googleKeyRefusal } from "../gemini/failures.js";
import type { Provider } from "../provider.js";
import { openaiComplete } from "./chat.js";
import { completionsNative } from "./completions.js";
import {
  openaiCountResponsesTokens,
  openaiEmbeddings,
  openaiImageEdits,
  openaiImages,
  openaiSpeech,
  openaiTranscription,
} from "./media.js";

/**
 * Any OpenAI-compatible API: chat completions, Responses and legacy completions where the provider
 * speaks them, media.
 */
export const openaiProvider: Provider = {
  needsBaseUrl: true,
  servesNatively: (style, provider) =>
    style === "chat" || (style === "responses" && Boolean(provider.responses_native)),
  takesCustomTools: true,
  completionsApi: true,
  textCompletions: (provider) => (completionsNative(provider) ? "native" : []),
  // Google's OpenAI-compatible endpoint refuses a key in Google's words, as Gemini's own API does.
  classify: googleKeyRefusal,
  complete: openaiComplete,
  countResponsesTokens: openaiCountResponsesTokens,
  embed: openaiEmbeddings,
  image: openaiImages,
  imageEdit: openaiImageEdits,
  speech: openaiSpeech,
  transcribe: openaiTranscription,
};
