import { microToIdr } from "../../store/money.js";
import type { Catalog, GatewayStore, ModelRow } from "../../store/types.js";
import type { Handler } from "../app-env.js";
import { presentsAdminKey } from "../auth/guards.js";
import { isFreeModelName } from "../billing/pricing.js";
import { modelNotFound } from "../dispatch/resolve.js";

/** GET /v1/models: public; an admin key adds the internal fields (provider, upstream model, wire). */
export function modelsHandler(store: GatewayStore): Handler {
  return (c) => {
    const admin = presentsAdminKey(store, c);
    const catalog = store.getCatalog();
    const data: object[] = [];
    for (const m of catalog.models.values()) {
      if (m.active) data.push(modelEntry(catalog, m, admin));
    }
    for (const [name, steps] of catalog.routes) data.push(routeEntry(name, steps, admin));
    return c.json({ object: "list", data });
  };
}

/**
 * GET /v1/models/{id}: the list's entry for one model or route. An unknown or inactive name is
 * the spec's 400 `model_not_found`, the answer every other route gives for it.
 */
export function modelHandler(store: GatewayStore): Handler {
  return (c) => {
    const id = c.req.param("id") ?? "";
    const catalog = store.getCatalog();
    const admin = presentsAdminKey(store, c);
    const model = catalog.models.get(id);
    if (model?.active) return c.json(modelEntry(catalog, model, admin));
    const steps = catalog.routes.get(id);
    if (steps) return c.json(routeEntry(id, steps, admin));
    throw modelNotFound(id, catalog);
  };
}

function modelEntry(catalog: Catalog, m: ModelRow, admin: boolean): object {
  if (!admin) return publicModel(m);
  const provider = catalog.providers.get(m.provider_id);
  return {
    ...publicModel(m),
    internal: {
      provider: m.provider_id,
      wire: provider?.wire,
      upstream_model: m.upstream_model,
      base_url: provider?.base_url ?? null,
    },
  };
}

function routeEntry(name: string, steps: string[], admin: boolean): object {
  return {
    id: name,
    object: "model",
    created: 0,
    owned_by: "gateway",
    type: "route",
    free: isFreeModelName(name),
    ...(admin ? { internal: { steps } } : {}),
  };
}

function publicModel(m: ModelRow) {
  return {
    id: m.name,
    object: "model",
    created: Math.floor(m.created_at / 1000),
    owned_by: "gateway",
    type: "model",
    modality: m.modality,
    free: isFreeModelName(m.name),
    subscribers_only: m.subscribers_only === 1,
    context_length: m.context_window,
    max_output_tokens: m.max_output_tokens,
    pricing: {
      currency: "IDR",
      input_per_mtok: m.price_input_per_mtok,
      output_per_mtok: m.price_output_per_mtok,
      per_request: microToIdr(m.price_per_request),
      per_unit: microToIdr(m.price_per_unit),
    },
  };
}
