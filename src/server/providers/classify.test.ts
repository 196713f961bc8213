import { describe, expect, it } from "vitest";
import { mapFailure } from "../dispatch/dispatcher.js";
import { errorBody, errorHeaders } from "../errors.js";
import { errorCodes, failureOf, rejectionReason, retryAfterMs } from "./classify.js";

/** What the client of a direct dispatch sees for the provider's answer: status, code, type. */
function clientSees(status: number, body = "", retryAfter?: string) {
  const err = mapFailure(failureOf(status, retryAfter, body));
  const { error } = errorBody(err, "chat") as { error: { type: string } };
  return {
    status: err.status,
    code: err.code,
    type: error.type,
    retryAfter: errorHeaders(err)["Retry-After"],
  };
}

describe("rejectionReason", () => {
  it("recognises a context-window rejection in either wire's words", () => {
    for (const body of [
      '{"error":{"code":"context_length_exceeded"}}',
      "This model's maximum context length is 8192 tokens",
      '{"type":"error","error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
      "Too many tokens in the request",
    ]) {
      expect(rejectionReason(400, body)).toBe("context_length_exceeded");
    }
  });

  it("recognises a content-policy rejection", () => {
    expect(rejectionReason(400, "Your request was rejected by our safety system")).toBe(
      "content_policy_violation",
    );
    expect(rejectionReason(403, '{"code":"content_filter"}')).toBe("content_policy_violation");
  });

  it("takes a 404, or a body saying the model is unknown, as model_not_found", () => {
    expect(rejectionReason(404, "")).toBe("model_not_found");
    expect(rejectionReason(400, "The model `gpt-9` does not exist")).toBe("model_not_found");
    expect(rejectionReason(400, "unknown model: claude-9")).toBe("model_not_found");
  });

  it("takes any other 400 or 422, or a body naming invalid_request, as invalid_request_error", () => {
    expect(rejectionReason(400, "bad field")).toBe("invalid_request_error");
    expect(rejectionReason(422, "")).toBe("invalid_request_error");
    expect(rejectionReason(403, '{"type":"invalid_request_error"}')).toBe("invalid_request_error");
  });

  it("falls back to upstream_rejected when nothing says why", () => {
    expect(rejectionReason(403, "forbidden")).toBe("upstream_rejected");
    expect(rejectionReason(413, "")).toBe("upstream_rejected");
  });

  it("reads the body's reason before the status's", () => {
    expect(rejectionReason(404, "context window exceeded")).toBe("context_length_exceeded");
  });
});

describe("retryAfterMs", () => {
  it("reads a number of seconds", () => {
    expect(retryAfterMs("3")).toBe(3_000);
    expect(retryAfterMs("0")).toBe(0);
    expect(retryAfterMs("1.5")).toBe(1_500);
  });

  it("reads an HTTP date as the time until it, never below zero", () => {
    const later = new Date(Date.now() + 20_000).toUTCString();
    const wait = retryAfterMs(later) ?? -1;
    expect(wait).toBeGreaterThan(18_000);
    expect(wait).toBeLessThanOrEqual(20_000);
    expect(retryAfterMs("Thu, 01 Jan 1970 00:00:00 GMT")).toBe(0);
  });

  it("takes the first of repeated headers", () => {
    expect(retryAfterMs(["2", "9"])).toBe(2_000);
  });

  it("names no wait for a missing or unreadable header", () => {
    expect(retryAfterMs(undefined)).toBeUndefined();
    expect(retryAfterMs("")).toBeUndefined();
    expect(retryAfterMs("soon")).toBeUndefined();
  });
});

describe("failureOf: a provider's error status as the client sees it", () => {
  it("a 429 is rate-limited with the provider's wait (for the key), and the client gets 429 upstream_error without Retry-After", () => {
    const failure = failureOf(429, "12", "slow down");
    expect(failure).toMatchObject({ kind: "rate_limited", status: 429, retryAfterMs: 12_000 });
    expect(clientSees(429, "slow down", "12")).toEqual({
      status: 429,
      code: "upstream_error",
      type: "upstream_error",
      retryAfter: undefined,
    });
  });

  it("a 429 without Retry-After waits as long as Google's RetryInfo asks; the header wins where both are", () => {
    const google = (retryDelay: unknown) =>
      JSON.stringify({
        error: {
          code: 429,
          status: "RESOURCE_EXHAUSTED",
          details: [
            { "@type": "type.googleapis.com/google.rpc.Help", links: [] },
            { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay },
          ],
        },
      });
    expect(failureOf(429, undefined, google("41s")).retryAfterMs).toBe(41_000);
    expect(failureOf(429, undefined, google("0.25s")).retryAfterMs).toBe(250);
    expect(failureOf(429, undefined, `[${google("7s")}]`).retryAfterMs).toBe(7_000);
    expect(failureOf(429, "3", google("41s")).retryAfterMs).toBe(3_000);
    for (const unreadable of ["soon", "-5s", 41, null])
      expect(failureOf(429, undefined, google(unreadable)).retryAfterMs).toBeUndefined();
    expect(clientSees(429, google("41s")).retryAfter).toBeUndefined();
  });

  it("a 401 refuses the key, not the body: the key cools and the client gets 503 upstream_error", () => {
    expect(failureOf(401, undefined, "invalid x-api-key")).toMatchObject({
      kind: "unauthorized",
      status: 503,
    });
    expect(clientSees(401, "invalid x-api-key")).toMatchObject({
      status: 503,
      code: "upstream_error",
    });
  });

  it("keeps an error body's own codes on a rejection for its provider to read, never its message", () => {
    const google = failureOf(
      400,
      undefined,
      googleError(400, "INVALID_ARGUMENT", "API key not valid.", "API_KEY_INVALID"),
    );
    expect(google).toMatchObject({ kind: "rejected", status: 400 });
    expect(google.codes).toEqual(["INVALID_ARGUMENT", "API_KEY_INVALID"]);
    // Google's streaming methods answer a list of one error.
    const listed = `[${googleError(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers")}]`;
    expect(failureOf(403, undefined, listed).codes).toEqual(["PERMISSION_DENIED"]);
    const openai = JSON.stringify({
      error: {
        message: "Incorrect API key",
        type: "invalid_request_error",
        code: "invalid_api_key",
      },
    });
    expect(errorCodes(openai)).toEqual(["invalid_api_key", "invalid_request_error"]);
    for (const text of ["", "<html>Bad Request</html>", "null", '{"error":"plain"}'])
      expect(errorCodes(text)).toEqual([]);
    expect(failureOf(503, undefined, openai).codes).toEqual([]);
  });

  it("Google's context-window rejection is context_length_exceeded", () => {
    const body = googleError(
      400,
      "INVALID_ARGUMENT",
      "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
    );
    expect(clientSees(400, body)).toMatchObject({ status: 400, code: "context_length_exceeded" });
  });

  it("a 5xx is the provider failing: 503 upstream_error", () => {
    for (const status of [500, 502, 503, 529]) {
      expect(failureOf(status, undefined, "overloaded").kind).toBe("unavailable");
      expect(clientSees(status, "overloaded")).toMatchObject({
        status: 503,
        code: "upstream_error",
        type: "upstream_error",
      });
    }
  });

  it("a 4xx rejection keeps its status and reason, typed invalid_request_error", () => {
    expect(clientSees(400, "maximum context length exceeded")).toEqual({
      status: 400,
      code: "context_length_exceeded",
      type: "invalid_request_error",
      retryAfter: undefined,
    });
    expect(clientSees(404, "")).toMatchObject({ status: 404, code: "model_not_found" });
    expect(clientSees(403, "flagged by moderation")).toMatchObject({
      status: 403,
      code: "content_policy_violation",
    });
    expect(clientSees(413, "")).toMatchObject({ status: 413, code: "upstream_rejected" });
  });

  it("a rejection with a status the spec does not keep becomes a 400", () => {
    expect(clientSees(409, "conflict")).toMatchObject({
      status: 400,
      code: "upstream_rejected",
      type: "invalid_request_error",
    });
  });
});

/** An error body as Google's APIs write it. */
function googleError(code: number, status: string, message: string, reason?: string): string {
  const details = reason ? [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason }] : [];
  return JSON.stringify({ error: { code, message, status, details } }, null, 2);
}
