import type { Catalog, GatewayStore, ModelRow, ProviderRow } from "../../store/types.js";
import { GatewayError } from "../errors.js";
import { type MediaModality, mediaWires } from "../providers/media-wires.js";

export interface Target {
  name: string;
  isRoute: boolean;
  /** Models in the order they are tried: route steps flattened depth-first. */
  models: ModelRow[];
}

export function modelNotFound(name: string): GatewayError {
  return new GatewayError(
    400,
    "model_not_found",
    `The model or route "${name}" does not exist or is not available.`,
  );
}

/** Resolves a model or route name against the catalog; config validation already ruled out cycles. */
export function resolveTarget(catalog: Catalog, name: string): Target {
  const model = catalog.models.get(name);
  if (model) {
    if (!model.active) throw modelNotFound(name);
    return { name, isRoute: false, models: [model] };
  }
  const steps = catalog.routes.get(name);
  if (!steps) throw modelNotFound(name);
  const models: ModelRow[] = [];
  const walk = (stepNames: string[], depth: number) => {
    for (const step of stepNames) {
      const m = catalog.models.get(step);
      if (m) {
        if (m.active) models.push(m);
      } else if (depth < 16) {
        walk(catalog.routes.get(step) ?? [], depth + 1);
      }
    }
  };
  walk(steps, 0);
  if (models.length === 0) throw modelNotFound(name);
  return { name, isRoute: true, models };
}

export const noWireForModality = (modality: string) =>
  new GatewayError(
    503,
    "no_wire_for_modality",
    `No active endpoint serves the ${modality} modality for this model.`,
  );

/**
 * Keeps the models that serve the route's modality (any of `served`, when models of several
 * modalities can); none left is the spec's no_wire_for_modality.
 */
export function forModality(target: Target, modality: string, served?: readonly string[]): Target {
  const models =
    served === undefined
      ? target.models.filter((m) => m.modality === modality)
      : target.models.filter((m) => served.includes(m.modality));
  if (models.length === 0) throw noWireForModality(modality);
  return models.length === target.models.length ? target : { ...target, models };
}

/** What the media filters read: the catalog, through the store that keeps it current. */
interface CatalogSource {
  store: Pick<GatewayStore, "getCatalog">;
}

/**
 * Keeps the models whose provider speaks a wire that can serve this media (an anthropic
 * provider cannot draw pictures); none left is the spec's no_wire_for_modality.
 */
export function forMediaWire(
  source: CatalogSource,
  target: Target,
  modality: MediaModality,
): Target {
  const providers = source.store.getCatalog().providers;
  const wires: readonly ProviderRow["wire"][] = mediaWires[modality];
  const models = target.models.filter((model) => {
    const wire = providers.get(model.provider_id)?.wire;
    return wire !== undefined && wires.includes(wire);
  });
  if (models.length === 0) throw noWireForModality(modality);
  return models.length === target.models.length ? target : { ...target, models };
}

/** Every candidate is the built-in mock: its answers (and refusals) are known before dispatch. */
export function onlyMock(source: CatalogSource, target: Target): boolean {
  const providers = source.store.getCatalog().providers;
  return target.models.every((model) => providers.get(model.provider_id)?.wire === "mock");
}
