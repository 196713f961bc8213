import { describe, expect, it } from "vitest";
import { mapFailure } from "../../dispatch/dispatcher.js";
import { failureOf } from "../classify.js";
import { openaiProvider } from "../openai/index.js";
import type { Provider } from "../provider.js";
import { geminiProvider } from "./index.js";

/** An error body as Google's APIs write it. */
function googleError(code: number, status: string, message: string, reason?: string): string {
  const details = reason ? [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason }] : [];
  return JSON.stringify({ error: { code, message, status, details } }, null, 2);
}

/** The failure as the gemini provider reads it, and what the client of a direct dispatch sees. */
function read(status: number, body: string, provider: Provider = geminiProvider) {
  const classified = failureOf(status, undefined, body);
  const failure = provider.classify?.(classified) ?? classified;
  const err = mapFailure(failure);
  return { kind: failure.kind, status: err.status, code: err.code };
}

describe("Gemini's failures", () => {
  it("Google's refusals of a key (400 API_KEY_INVALID, 403 PERMISSION_DENIED, 400 FAILED_PRECONDITION) are key failures: 503, the key cools", () => {
    const invalid = googleError(
      400,
      "INVALID_ARGUMENT",
      "API key not valid. Please pass a valid API key.",
      "API_KEY_INVALID",
    );
    const denied = googleError(
      403,
      "PERMISSION_DENIED",
      "Method doesn't allow unregistered callers",
    );
    const noBilling = googleError(
      400,
      "FAILED_PRECONDITION",
      "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.",
    );
    for (const [status, body] of [
      [400, invalid],
      [403, denied],
      [403, `[${denied}]`],
      [400, noBilling],
    ] as const) {
      expect(read(status, body)).toEqual({
        kind: "unauthorized",
        status: 503,
        code: "upstream_error",
      });
    }
    // Google's OpenAI-compatible endpoint, behind the openai wire, says it the same way.
    expect(read(400, `[${invalid}]`, openaiProvider)).toMatchObject({ kind: "unauthorized" });
  });

  it("any other 400 from Google is a rejection of the body, read as the gateway reads any", () => {
    const bad = googleError(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    expect(read(400, bad)).toEqual({
      kind: "rejected",
      status: 400,
      code: "invalid_request_error",
    });
    const long = googleError(
      400,
      "INVALID_ARGUMENT",
      "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
    );
    expect(read(400, long)).toEqual({
      kind: "rejected",
      status: 400,
      code: "context_length_exceeded",
    });
  });
});
