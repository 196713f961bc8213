import { FakeUpstream, type Handler } from "./fake-upstream.js";
import { defaultGeminiAnswer, defaultGeminiRules, type GeminiRules } from "./gemini-wire.js";

export * from "./gemini-wire.js";

/**
 * A fake Google Gemini API on 127.0.0.1: `FakeUpstream`'s plumbing (every request recorded,
 * answers scripted as JSON, SSE, errors, hangs and cuts) with Google's rules and answers
 * (`gemini-wire.ts`). Its `url` is the provider's `base_url` (the API root).
 */
export async function fakeGemini(
  rules: Partial<GeminiRules> = {},
  handler: Handler = defaultGeminiAnswer,
): Promise<FakeUpstream> {
  return new FakeUpstream("gemini", handler, { ...defaultGeminiRules, ...rules }).start();
}
