import type { ProviderRow } from "../../store/types.js";
import type { ClientStyle } from "../wire/completion-types.js";
import type { TextOnlyField } from "../wire/translate/text-completion.js";
import { anthropicProvider } from "./anthropic/index.js";
import { geminiProvider } from "./gemini/index.js";
import { mockProvider } from "./mock/index.js";
import { openaiProvider } from "./openai/index.js";
import type { Provider } from "./provider.js";

/**
 * Every provider wire, by the name a config gives it. Adding a wire is its folder and one line
 * here: the config schema, the database's check on `providers.wire` and the modality filters
 * all read this list.
 */
export const providerWires = {
  openai: openaiProvider,
  anthropic: anthropicProvider,
  mock: mockProvider,
  gemini: geminiProvider,
} satisfies Record<string, Provider>;

export type Wire = keyof typeof providerWires;

export const wireNames = Object.keys(providerWires) as [Wire, ...Wire[]];

/** What a model can be configured to serve. */
export const modalities = [
  "chat",
  "image",
  "speech",
  "transcription",
  "music",
  "video",
  "embedding",
  "edit",
] as const;

export type Modality = (typeof modalities)[number];

/** The method of `Provider` that serves each modality. */
const methodOf = {
  chat: "complete",
  embedding: "embed",
  image: "image",
  edit: "imageEdit",
  speech: "speech",
  transcription: "transcribe",
  music: "music",
  video: "video",
} as const satisfies Record<Modality, keyof Provider>;

export function providerOf(row: Pick<ProviderRow, "wire">): Provider {
  const provider = (providerWires as Record<string, Provider>)[row.wire];
  // The config schema and the database's check admit only these names.
  if (!provider) throw new Error(`no provider wire "${row.wire}"`);
  return provider;
}

/** Whether the provider's wire can serve the modality at all. */
export function serves(row: Pick<ProviderRow, "wire">, modality: Modality): boolean {
  return providerOf(row)[methodOf[modality]] !== undefined;
}

type MethodOf = typeof methodOf;

/**
 * The provider's method for a modality. Targets are filtered first (`forMediaWire`), so a
 * provider without it is a gateway bug here, not a client's mistake.
 */
export function provide<M extends Modality>(
  row: Pick<ProviderRow, "wire">,
  modality: M,
): NonNullable<Provider[MethodOf[M]]> {
  const method = providerOf(row)[methodOf[modality]];
  if (!method) throw new Error(`wire "${row.wire}" has no ${modality}`);
  return method as NonNullable<Provider[MethodOf[M]]>;
}

export function servesNatively(row: ProviderRow, style: ClientStyle): boolean {
  return providerOf(row).servesNatively(style, row);
}

/**
 * What a model of this provider answers of the legacy Completions API beyond chat's fields:
 * `"native"` (its server's own Completions API), or the fields its chat answers carry.
 */
export function textCompletionsOf(row: ProviderRow): "native" | readonly TextOnlyField[] {
  return providerOf(row).textCompletions?.(row) ?? [];
}

/** Whether a provider may be configured to serve the Completions API itself (`completions_native`). */
export function hasCompletionsApi(row: Pick<ProviderRow, "wire">): boolean {
  return providerOf(row).completionsApi === true;
}

/** The built-in mock: its answers and refusals are known before anything is dispatched. */
export function isBuiltIn(row: Pick<ProviderRow, "wire">): boolean {
  return providerOf(row).builtIn === true;
}
