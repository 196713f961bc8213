import type { ProviderRow } from "../../store/types.js";

/**
 * Which provider wires serve which media (and embeddings). Images, edits, embeddings and audio
 * go to the mock or any OpenAI-compatible API; music and video jobs are produced by the mock only, since no provider
 * API for them is wired yet.
 */
export const mediaWires = {
  image: ["mock", "openai"],
  edit: ["mock", "openai"],
  embedding: ["mock", "openai"],
  speech: ["mock", "openai"],
  transcription: ["mock", "openai"],
  music: ["mock"],
  video: ["mock"],
} as const satisfies Record<string, readonly ProviderRow["wire"][]>;

export type MediaModality = keyof typeof mediaWires;
