import type { ModelRow } from "../../store/types.js";

/** What a request may consume at most, known before dispatch. */
export interface WorstCase {
  inputTokens: number;
  outputTokens: number;
  /** Images, seconds of audio or video, characters of speech: whatever `price_per_unit` counts. */
  units: number;
}

export interface Metered {
  inputTokens: number;
  outputTokens: number;
  units: number;
}

/** Cost in micro-IDR. Token prices are whole IDR per million tokens, so one token costs that many micro-IDR. */
export function costMicro(model: ModelRow, used: Metered): number {
  return (
    used.inputTokens * model.price_input_per_mtok +
    used.outputTokens * model.price_output_per_mtok +
    used.units * model.price_per_unit +
    model.price_per_request
  );
}

export function isFreeModelName(name: string): boolean {
  return name.endsWith(":free");
}

/**
 * A generous upper bound on input tokens from the request size: no tokenizer yields more than
 * one token per two bytes of JSON for real text, and a model cannot read past its context window.
 */
export function worstCaseInputTokens(bodyBytes: number, model: ModelRow): number {
  return Math.min(model.context_window, Math.ceil(bodyBytes / 2));
}

/**
 * Whether a completion body names input the provider reads from elsewhere: an image or document
 * by URL (not a `data:` URL), a file by id. Its tokens are not in the body's bytes (a URL of sixty
 * bytes can stand for a thousand-token image, a file id for a whole PDF), so the hold takes the
 * model's context window for the input. `keyWritten`: whether the walk of the body's text found
 * such a key (`JsonShape.referenceKey`), when the body is the one walked; most bodies have none,
 * and then the parsed body need not be walked.
 */
export function readsInputByReference(body: unknown, keyWritten?: boolean): boolean {
  return keyWritten !== false && hasReference(body, 0);
}

function hasReference(value: unknown, depth: number): boolean {
  if (typeof value !== "object" || value === null || depth > 64) return false;
  if (Array.isArray(value)) return value.some((item) => hasReference(item, depth + 1));
  const record = value as Record<string, unknown>;
  for (const key of ["url", "image_url", "file_url"]) {
    const url = record[key];
    if (typeof url === "string" && !url.startsWith("data:")) return true;
  }
  if (typeof record.file_id === "string") return true;
  for (const item of Object.values(record)) if (hasReference(item, depth + 1)) return true;
  return false;
}
