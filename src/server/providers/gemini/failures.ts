import { UpstreamFailure } from "../../wire/upstream-failure.js";

/**
 * Google's APIs refuse a key with a 400 `API_KEY_INVALID` or a 403 `PERMISSION_DENIED`, never a
 * 401 (`UNAUTHENTICATED` is their 401). A 400 `FAILED_PRECONDITION` is the key's project unable to
 * use the Gemini API at all (Google's troubleshooting guide: the free tier is not available in
 * the caller's country and the project has no billing), whatever the request.
 */
const keyRefusals = new Set([
  "API_KEY_INVALID",
  "PERMISSION_DENIED",
  "UNAUTHENTICATED",
  "FAILED_PRECONDITION",
]);

/**
 * A key Google refuses is the key's failure, not the client's: it cools down like a 429 and the
 * client sees a provider failure (503), never a rejection of its own body.
 */
export function googleKeyRefusal(failure: UpstreamFailure): UpstreamFailure | undefined {
  return failure.codes.some((code) => keyRefusals.has(code))
    ? new UpstreamFailure("unauthorized", 503)
    : undefined;
}
