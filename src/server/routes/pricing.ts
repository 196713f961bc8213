import { microToIdr } from "../../store/money.js";
import type { GatewayStore } from "../../store/types.js";
import { isFreeModelName } from "../billing/pricing.js";
import type { Handler } from "../http/context.js";

/** GET /api/public/pricing: the current free-model limits per tier and every model's prices. */
export function pricingHandler(store: GatewayStore): Handler {
  return (c) => {
    const catalog = store.getCatalog();
    return c.json({
      currency: "IDR",
      free_limits: Object.fromEntries(
        [...catalog.tiers.values()].map((t) => [
          t.name,
          {
            requests_per_minute: t.free_rpm,
            requests_per_day: t.free_daily,
            min_topup_idr: t.min_topup_micro === null ? null : microToIdr(t.min_topup_micro),
          },
        ]),
      ),
      models: [...catalog.models.values()]
        .filter((m) => m.active)
        .map((m) => ({
          id: m.name,
          modality: m.modality,
          free: isFreeModelName(m.name),
          subscribers_only: m.subscribers_only === 1,
          input_per_mtok_idr: m.price_input_per_mtok,
          output_per_mtok_idr: m.price_output_per_mtok,
          per_request_idr: microToIdr(m.price_per_request),
          per_unit_idr: microToIdr(m.price_per_unit),
          free_token_budget: m.free_token_budget
            ? { tokens: m.free_token_budget, window_seconds: m.free_token_window_seconds }
            : null,
        })),
    });
  };
}
