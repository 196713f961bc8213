import type { Context } from "hono";
import { microToIdr } from "../../store/money.js";
import type { ModelRow } from "../../store/types.js";
import { presentedKey } from "../auth.js";
import { isFreeModelName } from "../billing/pricing.js";
import type { Services } from "../services.js";

/** GET /v1/models: public; an admin key adds the internal fields (provider, upstream model, wire). */
export function modelsRoute(s: Services) {
  return (c: Context) => {
    const presented = presentedKey(c);
    const admin = presented !== undefined && s.store.isAdminKey(presented);
    const catalog = s.store.getCatalog();
    const data: object[] = [];
    for (const m of catalog.models.values()) {
      if (!m.active) continue;
      const provider = catalog.providers.get(m.provider_id);
      data.push({
        ...publicModel(m),
        ...(admin
          ? {
              internal: {
                provider: m.provider_id,
                wire: provider?.wire,
                upstream_model: m.upstream_model,
                base_url: provider?.base_url ?? null,
              },
            }
          : {}),
      });
    }
    for (const [name, steps] of catalog.routes) {
      data.push({
        id: name,
        object: "model",
        created: 0,
        owned_by: "gateway",
        type: "route",
        free: isFreeModelName(name),
        ...(admin ? { internal: { steps } } : {}),
      });
    }
    return c.json({ object: "list", data });
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
