import type { ErrorCode } from "../errors.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";

/**
 * Reads why a provider rejected a request from its status and error body. Only the reason code
 * leaves this function: the body itself is never shown to the client.
 */
export function rejectionReason(status: number, bodyText: string): ErrorCode {
  const text = bodyText.toLowerCase();
  if (
    /context[_ ]length|maximum context|context window|too many tokens|prompt is too long|exceeds the maximum number of tokens/.test(
      text,
    )
  ) {
    return "context_length_exceeded";
  }
  if (/content[_ ]policy|content[_ ]filter|safety|moderation/.test(text))
    return "content_policy_violation";
  if (
    status === 404 ||
    /model_not_found|model .* (does not exist|not found)|unknown model/.test(text)
  ) {
    return "model_not_found";
  }
  if (status === 400 || status === 422 || /invalid_request/.test(text))
    return "invalid_request_error";
  return "upstream_rejected";
}

export function retryAfterMs(header: string | string[] | undefined): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/**
 * The codes an error body gives itself: `error.status`, `.code` and `.type` where they are words,
 * and each `error.details[].reason` (Google's answers may come as a one-element list). A
 * provider's `classify` reads them; the body's message goes no further than this module.
 */
export function errorCodes(text: string): string[] {
  const error = errorObject(text);
  if (!error) return [];
  const { status, code, type, details } = error;
  const codes = [status, code, type].filter((word) => typeof word === "string");
  if (Array.isArray(details)) {
    for (const detail of details) {
      const reason = (detail as { reason?: unknown } | null)?.reason;
      if (typeof reason === "string") codes.push(reason);
    }
  }
  return codes;
}

/**
 * How long an error body asks the caller to wait: the `retryDelay` of a `google.rpc.RetryInfo` in
 * `error.details` (Google's 429s carry no Retry-After header, only this), a protobuf Duration
 * such as "41s" or "0.5s".
 */
export function bodyRetryDelayMs(text: string): number | undefined {
  const details = errorObject(text)?.details;
  if (!Array.isArray(details)) return undefined;
  for (const detail of details) {
    const delay = (detail as { retryDelay?: unknown } | null)?.retryDelay;
    const seconds = typeof delay === "string" ? /^(\d+(?:\.\d+)?)s$/.exec(delay)?.[1] : undefined;
    if (seconds !== undefined) return Math.ceil(Number(seconds) * 1000);
  }
  return undefined;
}

/** An error body's `error` object (Google's answers may come as a one-element list). */
function errorObject(text: string): Record<string, unknown> | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  const root = (Array.isArray(parsed) ? parsed[0] : parsed) as { error?: unknown } | null;
  const error = typeof root === "object" && root !== null ? root.error : undefined;
  return typeof error === "object" && error !== null
    ? (error as Record<string, unknown>)
    : undefined;
}

/**
 * What a non-2xx status means for the attempt; the provider's body only picks the reason, unless
 * `reason` gives it (the mock's scripted failures, which have no body).
 */
export function failureOf(
  status: number,
  retryAfter: string | string[] | undefined,
  text: string,
  reason?: ErrorCode,
): UpstreamFailure {
  if (status === 429) {
    const wait = retryAfterMs(retryAfter) ?? bodyRetryDelayMs(text);
    return new UpstreamFailure("rate_limited", 429, "upstream_rejected", wait);
  }
  // The provider refused the credential, not the request: the key cools down like a 429 and the
  // caller sees a provider failure (503), never a rejection of their own body. An API that says
  // so with another status reads its rejection again (`Provider.classify`, from the codes).
  if (status === 401) return new UpstreamFailure("unauthorized", 503);
  if (status >= 400 && status < 500) {
    return new UpstreamFailure(
      "rejected",
      status,
      reason ?? rejectionReason(status, text),
      undefined,
      errorCodes(text),
    );
  }
  // A server failing for a while may say how long (RFC 9110: a 503's Retry-After): a direct
  // request's client is told, while the key is not cooled, as it was not the key's limit.
  return new UpstreamFailure("unavailable", status, "upstream_rejected", retryAfterMs(retryAfter));
}
