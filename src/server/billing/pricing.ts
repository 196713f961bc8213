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
