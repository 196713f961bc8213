import type { Provider } from "../provider.js";
import { openaiComplete } from "./chat.js";
import {
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
  complete: openaiComplete,
  embed: openaiEmbeddings,
  image: openaiImages,
  imageEdit: openaiImageEdits,
  speech: openaiSpeech,
  transcribe: openaiTranscription,
};
