import type { Catalog, GatewayStore, ModelRow } from "../../store/types.js";
import { GatewayError } from "../errors.js";
import { nearest } from "../nearest.js";
import type { Provider } from "../providers/provider.js";
import { type Modality, providerOf, serves } from "../providers/registry.js";

export interface Target {
  name: string;
  isRoute: boolean;
  /** Models in the order they are tried: route steps flattened depth-first. */
  models: ModelRow[];
}

/** `target` narrowed to the steps its admission allows (`Admission.steps`). */
export function servedBy(target: Target, admission: { steps: ModelRow[] }): Target {
  return admission.steps === target.models ? target : { ...target, models: admission.steps };
}

/** The spec's 400 for a name the catalog cannot serve, naming the closest one it can. */
export function modelNotFound(name: string, catalog?: Catalog): GatewayError {
  const closest = catalog && closestName(name, catalog);
  const hint = closest ? ` Did you mean "${closest}"?` : "";
  return new GatewayError(
    400,
    "model_not_found",
    `The model or route "${name}" does not exist or is not available.${hint} GET /v1/models lists the models and routes.`,
  );
}

/** The active model or route name nearest to `name` by edit distance, if it is near at all. */
function closestName(name: string, catalog: Catalog): string | undefined {
  const names = [...catalog.models.values()].filter((m) => m.active).map((m) => m.name);
  return nearest(name, [...names, ...catalog.routes.keys()]);
}

/** How many routes deep a route's steps are followed; the config refuses deeper nesting. */
export const maxRouteNesting = 16;

/**
 * How many steps a request walks through a route at most, counting a route's steps again each
 * time a step names it: routes that name the same routes multiply, doubling with each level where
 * each names the same two below. The config refuses a route that expands to more.
 */
export const maxRouteSteps = 64;

/** Resolves a model or route name against the catalog; config validation already ruled out cycles. */
export function resolveTarget(catalog: Catalog, name: string): Target {
  const model = catalog.models.get(name);
  if (model) {
    if (!model.active) throw modelNotFound(name, catalog);
    return { name, isRoute: false, models: [model] };
  }
  const steps = catalog.routes.get(name);
  if (!steps) throw modelNotFound(name, catalog);
  const models: ModelRow[] = [];
  // A catalog the config did not check (a database an older gateway wrote) is cut off here.
  let left = maxRouteSteps;
  const walk = (stepNames: string[], depth: number) => {
    for (const step of stepNames) {
      if (left-- <= 0) return;
      const m = catalog.models.get(step);
      if (m) {
        if (m.active) models.push(m);
      } else if (depth < maxRouteNesting) {
        walk(catalog.routes.get(step) ?? [], depth + 1);
      }
    }
  };
  walk(steps, 0);
  if (models.length === 0) throw modelNotFound(name, catalog);
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
 * Keeps the models whose provider can serve this modality at all (an anthropic provider cannot
 * draw pictures); none left is the spec's no_wire_for_modality.
 */
export function forMediaWire(source: CatalogSource, target: Target, modality: Modality): Target {
  const providers = source.store.getCatalog().providers;
  const models = target.models.filter((model) => {
    const provider = providers.get(model.provider_id);
    return provider !== undefined && serves(provider, modality);
  });
  if (models.length === 0) throw noWireForModality(modality);
  return models.length === target.models.length ? target : { ...target, models };
}

/**
 * The refusal of a request that every candidate's provider would refuse whatever happens (the
 * mock asked for mp3), answered before any money is held; undefined when any may serve it.
 */
export function sureRefusal(
  source: CatalogSource,
  target: Target,
  refusal: (provider: Provider) => Error | undefined,
): Error | undefined {
  const providers = source.store.getCatalog().providers;
  let first: Error | undefined;
  for (const model of target.models) {
    const row = providers.get(model.provider_id);
    const reason = row ? refusal(providerOf(row)) : undefined;
    if (!reason) return undefined;
    first ??= reason;
  }
  return first;
}
