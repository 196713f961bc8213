import { googleKeyRefusal } from "../gemini/failures.js";
import type { Provider } from "../provider.js";
import { openaiComplete } from "./chat.js";
import {
  openaiCountResponsesTokens,
  openaiEmbeddings,
  openaiImageEdits,
  openaiImages,
  openaiSpeech,
  openaiTranscription,
} from "./media.js";

/** Any OpenAI-compatible API: chat completions, Responses where the provider speaks it, media. */
export const openaiProvider: Provider = {
  needsBaseUrl: true,
  servesNatively: (style, provider) =>
    style === "chat" || (style === "responses" && Boolean(provider.responses_native)),
  takesCustomTools: true,
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
