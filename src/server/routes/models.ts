import type { Context } from "hono";
import { microToIdr } from "../../store/money.js";
import { shownUrl } from "../../store/secrets.js";
import type { Catalog, GatewayStore, ModelRow } from "../../store/types.js";
import { presentsAdminKey } from "../auth/guards.js";
import { isFreeModelName } from "../billing/pricing.js";
import { modelNotFound } from "../dispatch/resolve.js";
import { badRequest, errorResponse, GatewayError } from "../errors.js";
import type { Handler } from "../http/context.js";
import { requestHeader } from "../http/request.js";

/**
 * GET /v1/models: public; an admin key adds the internal fields (provider, upstream model, wire).
 * A request carrying `anthropic-version` (the Anthropic SDKs always send it) gets Anthropic's
 * shape and paging; any other, OpenAI's list.
 */
export function modelsHandler(store: GatewayStore, runAdminKeys?: ReadonlySet<string>): Handler {
  return (c) => {
    const admin = presentsAdminKey(store, c, runAdminKeys);
    const catalog = store.getCatalog();
    if (anthropicClient(c)) {
      const page = anthropicPage(c, catalogIds(catalog));
      if (page instanceof GatewayError) return errorResponse(page, "messages", "GET /v1/models");
      return c.json({
        data: page.ids.map((id) => anthropicEntry(catalog, id, admin)),
        has_more: page.hasMore,
        first_id: page.ids[0] ?? null,
        last_id: page.ids.at(-1) ?? null,
      });
    }
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
 * the spec's 400 `model_not_found`, the answer every other route gives for it; in Anthropic's
 * shape it is Anthropic's 404 `not_found_error`, which its SDKs raise as NotFoundError.
 */
export function modelHandler(store: GatewayStore, runAdminKeys?: ReadonlySet<string>): Handler {
  return (c) => {
    const id = c.req.param("id") ?? "";
    const catalog = store.getCatalog();
    const admin = presentsAdminKey(store, c, runAdminKeys);
    const known = catalog.models.get(id)?.active === 1 || catalog.routes.has(id);
    if (anthropicClient(c)) {
      if (known) return c.json(anthropicEntry(catalog, id, admin));
      const missing = modelNotFound(id);
      return errorResponse(
        new GatewayError(404, "not_found", missing.message),
        "messages",
        "GET /v1/models/:id",
      );
    }
    const model = catalog.models.get(id);
    if (model?.active) return c.json(modelEntry(catalog, model, admin));
    const steps = catalog.routes.get(id);
    if (steps) return c.json(routeEntry(id, steps, admin));
    throw modelNotFound(id, catalog);
  };
}

const anthropicClient = (c: Context) => requestHeader(c, "anthropic-version") !== undefined;

/** Every listed id in the list's order: active models, then routes. */
function catalogIds(catalog: Catalog): string[] {
  const ids: string[] = [];
  for (const m of catalog.models.values()) if (m.active) ids.push(m.name);
  for (const name of catalog.routes.keys()) ids.push(name);
  return ids;
}

/**
 * Anthropic's list paging: `limit` (1-1000, default 20) items after `after_id`, or the `limit`
 * items just before `before_id`; `has_more` says whether more lie in the direction of travel.
 */
function anthropicPage(
  c: Context,
  ids: string[],
): { ids: string[]; hasMore: boolean } | GatewayError {
  const query = c.req.query();
  const rawLimit = query.limit ?? "20";
  const limit = Number(rawLimit);
  if (!/^\d+$/.test(rawLimit) || limit < 1 || limit > 1000) {
    return badRequest("limit: Input should be an integer from 1 to 1000.");
  }
  const { after_id: afterId, before_id: beforeId } = query;
  if (afterId !== undefined && beforeId !== undefined) {
    return badRequest("after_id, before_id: Only one of them may be given.");
  }
  if (beforeId !== undefined) {
    const end = ids.indexOf(beforeId);
    if (end < 0) return badRequest(`before_id: No model or route "${beforeId}".`);
    const start = Math.max(0, end - limit);
    return { ids: ids.slice(start, end), hasMore: start > 0 };
  }
  let start = 0;
  if (afterId !== undefined) {
    const index = ids.indexOf(afterId);
    if (index < 0) return badRequest(`after_id: No model or route "${afterId}".`);
    start = index + 1;
  }
  return { ids: ids.slice(start, start + limit), hasMore: start + limit < ids.length };
}

/**
 * Anthropic's ModelInfo for a listed model or route: the fields its SDKs type (capabilities the
 * gateway does not know are null), then the gateway's own fields, as in the OpenAI shape.
 */
function anthropicEntry(catalog: Catalog, id: string, admin: boolean): object {
  const model = catalog.models.get(id);
  const info = {
    type: "model",
    id,
    display_name: id,
    created_at: new Date(model?.created_at ?? 0).toISOString(),
    capabilities: null,
    lifecycle: "active",
    deprecated_at: null,
    retires_at: null,
    line: null,
    max_input_tokens: model?.context_window ?? null,
    max_tokens: model?.max_output_tokens ?? null,
  };
  if (model?.active) return { ...info, ...modelFields(catalog, model, admin) };
  return { ...info, route: true, ...routeFields(id, catalog.routes.get(id) ?? [], admin) };
}

function modelEntry(catalog: Catalog, m: ModelRow, admin: boolean): object {
  return {
    id: m.name,
    object: "model",
    created: Math.floor(m.created_at / 1000),
    owned_by: "gateway",
    type: "model",
    ...modelFields(catalog, m, admin),
  };
}

function routeEntry(name: string, steps: string[], admin: boolean): object {
  return {
    id: name,
    object: "model",
    created: 0,
    owned_by: "gateway",
    type: "route",
    ...routeFields(name, steps, admin),
  };
}

/** What the gateway tells of a model in either shape; an admin also sees where it is served. */
function modelFields(catalog: Catalog, m: ModelRow, admin: boolean): object {
  const fields = {
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
  if (!admin) return fields;
  const provider = catalog.providers.get(m.provider_id);
  return {
    ...fields,
    internal: {
      provider: m.provider_id,
      wire: provider?.wire,
      upstream_model: m.upstream_model,
      // A user, password or query written into it may be a credential: shown as `***`.
      base_url: provider?.base_url ? shownUrl(provider.base_url) : null,
    },
  };
}

function routeFields(name: string, steps: string[], admin: boolean): object {
  return { free: isFreeModelName(name), ...(admin ? { internal: { steps } } : {}) };
}
