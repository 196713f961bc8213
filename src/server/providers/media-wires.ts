import type { ProviderRow } from "../../store/types.js";
import { noWireForModality, type Target } from "../dispatch/resolve.js";
import type { Services } from "../services.js";

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

/**
 * Keeps the models whose provider speaks a wire that can serve this media (an anthropic
 * provider cannot draw pictures); none left is the spec's no_wire_for_modality.
 */
export function forMediaWire(s: Services, target: Target, modality: MediaModality): Target {
  const providers = s.store.getCatalog().providers;
  const wires: readonly ProviderRow["wire"][] = mediaWires[modality];
  const models = target.models.filter((m) => {
    const wire = providers.get(m.provider_id)?.wire;
    return wire !== undefined && wires.includes(wire);
  });
  if (models.length === 0) throw noWireForModality(modality);
  return models.length === target.models.length ? target : { ...target, models };
}

/** Every candidate is the built-in mock: its answers (and refusals) are known before dispatch. */
export function onlyMock(s: Services, target: Target): boolean {
  const providers = s.store.getCatalog().providers;
  return target.models.every((m) => providers.get(m.provider_id)?.wire === "mock");
}
