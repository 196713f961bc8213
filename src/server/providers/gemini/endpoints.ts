import { joinUrl } from "../http-upstream.js";
import type { Attempt } from "../provider.js";

/** The key goes in `x-goog-api-key`, never in the URL, where logs and traces would keep it. */
export function geminiHeaders(attempt: Attempt): Record<string, string> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (attempt.credential.secret) headers["x-goog-api-key"] = attempt.credential.secret;
  return headers;
}

/** `models/<name>`, as Gemini names a model in bodies and paths. */
export function modelName(attempt: Attempt): string {
  const name = attempt.model.upstream_model;
  return name.startsWith("models/") ? name : `models/${name}`;
}

/** `{base_url}/v1beta/models/<model>:<method>`: the provider's base_url is the API root. */
export function methodUrl(attempt: Attempt, method: string): string {
  return joinUrl(attempt.provider.base_url ?? "", `/v1beta/${modelName(attempt)}:${method}`);
}
