import { describe, expect, it } from "vitest";
import type { Catalog, ModelRow, ProviderRow } from "../../store/types.js";
import type { Provider } from "../providers/provider.js";
import { forMediaWire, forModality, resolveTarget, sureRefusal, type Target } from "./resolve.js";

function model(name: string, fields: Partial<ModelRow> = {}): ModelRow {
  return {
    name,
    provider_id: "mock",
    upstream_model: name,
    modality: "chat",
    price_input_per_mtok: 0,
    price_output_per_mtok: 0,
    price_per_request: 0,
    price_per_unit: 0,
    subscribers_only: 0,
    context_window: 8_192,
    max_output_tokens: 1_024,
    free_token_budget: null,
    free_token_window_seconds: null,
    active: 1,
    created_at: 0,
    unsupported_tools: null,
    ...fields,
  };
}

function provider(id: string, wire: ProviderRow["wire"]): ProviderRow {
  return {
    id,
    wire,
    base_url: null,
    api_key_count: 0,
    api_keys: [],
    timeout_ms: 30_000,
    max_concurrency: null,
    options_json: "{}",
    responses_native: 0,
  };
}

function catalog(
  models: ModelRow[],
  routes: Record<string, string[]> = {},
  providers: ProviderRow[] = [provider("mock", "mock")],
): Catalog {
  return {
    providers: new Map(providers.map((row) => [row.id, row])),
    models: new Map(models.map((row) => [row.name, row])),
    routes: new Map(Object.entries(routes)),
    tiers: new Map(),
  };
}

const names = (target: Target) => target.models.map((row) => row.name);

const modelNotFound = expect.objectContaining({ status: 400, code: "model_not_found" });
const noWire = expect.objectContaining({ status: 503, code: "no_wire_for_modality" });

describe("resolveTarget", () => {
  it("resolves a model's name to that one model, not as a route", () => {
    const target = resolveTarget(catalog([model("alpha"), model("beta")]), "beta");
    expect(target).toMatchObject({ name: "beta", isRoute: false });
    expect(names(target)).toEqual(["beta"]);
  });

  it("answers 400 model_not_found for a name that is neither a model nor a route", () => {
    expect(() => resolveTarget(catalog([model("alpha")]), "gamma")).toThrow(modelNotFound);
  });

  it("answers 400 model_not_found for a model that is not active", () => {
    expect(() => resolveTarget(catalog([model("alpha", { active: 0 })]), "alpha")).toThrow(
      modelNotFound,
    );
  });

  it("resolves a route to its models in the order of its steps", () => {
    const target = resolveTarget(
      catalog([model("alpha"), model("beta"), model("gamma")], { fallback: ["gamma", "alpha"] }),
      "fallback",
    );
    expect(target).toMatchObject({ name: "fallback", isRoute: true });
    expect(names(target)).toEqual(["gamma", "alpha"]);
  });

  it("flattens nested routes depth-first: an inner route's models take its step's place", () => {
    const target = resolveTarget(
      catalog([model("one"), model("two"), model("three"), model("four"), model("five")], {
        outer: ["one", "middle", "five"],
        middle: ["two", "inner", "four"],
        inner: ["three"],
      }),
      "outer",
    );
    expect(names(target)).toEqual(["one", "two", "three", "four", "five"]);
  });

  it("leaves out a route's inactive models", () => {
    const target = resolveTarget(
      catalog([model("alpha", { active: 0 }), model("beta")], {
        chain: ["alpha", "beta"],
      }),
      "chain",
    );
    expect(names(target)).toEqual(["beta"]);
  });

  it("answers 400 model_not_found for a route none of whose models is active", () => {
    expect(() =>
      resolveTarget(catalog([model("alpha", { active: 0 })], { chain: ["alpha"] }), "chain"),
    ).toThrow(modelNotFound);
  });
});

describe("forModality", () => {
  const mixed = resolveTarget(
    catalog([model("chatty"), model("painter", { modality: "image" }), model("talker")], {
      mixed: ["chatty", "painter", "talker"],
    }),
    "mixed",
  );

  it("keeps the models of the route's modality, in order", () => {
    expect(names(forModality(mixed, "chat"))).toEqual(["chatty", "talker"]);
    expect(names(forModality(mixed, "image"))).toEqual(["painter"]);
  });

  it("returns the same target when every model serves the modality", () => {
    const chat = forModality(mixed, "chat");
    expect(forModality(chat, "chat")).toBe(chat);
  });

  it("keeps the models of any of the served modalities when several may serve", () => {
    expect(names(forModality(mixed, "edit", ["image", "edit"]))).toEqual(["painter"]);
  });

  it("answers 503 no_wire_for_modality when no model serves it", () => {
    expect(() => forModality(mixed, "embedding")).toThrow(noWire);
    expect(() => forModality(mixed, "edit", ["edit"])).toThrow(noWire);
  });
});

describe("forMediaWire and sureRefusal", () => {
  const providers = [
    provider("mock", "mock"),
    provider("openai", "openai"),
    provider("claude", "anthropic"),
  ];
  const rows = [
    model("mock-art", { modality: "image" }),
    model("openai-art", { modality: "image", provider_id: "openai" }),
    model("claude-art", { modality: "image", provider_id: "claude" }),
  ];
  /** The catalog, and the services' store that hands it out. */
  const media = (routes: Record<string, string[]>) => {
    const snapshot = catalog(rows, routes, providers);
    return { snapshot, services: { store: { getCatalog: () => snapshot } } };
  };

  it("keeps the models whose provider's wire can serve the media", () => {
    const { snapshot, services } = media({ art: ["claude-art", "openai-art", "mock-art"] });
    const target = resolveTarget(snapshot, "art");
    expect(names(forMediaWire(services, target, "image"))).toEqual(["openai-art", "mock-art"]);
    expect(names(forMediaWire(services, target, "music"))).toEqual(["mock-art"]);
  });

  it("answers 503 no_wire_for_modality when only an anthropic provider is left", () => {
    const { snapshot, services } = media({});
    expect(() => forMediaWire(services, resolveTarget(snapshot, "claude-art"), "image")).toThrow(
      noWire,
    );
  });

  it("refuses early only what every candidate's provider would refuse", () => {
    const { snapshot, services } = media({ art: ["mock-art", "openai-art"] });
    const speech = { body: { input: "hi", response_format: "mp3" } };
    const mp3 = (p: Provider) => p.refuses?.speech?.(speech);
    expect(sureRefusal(services, resolveTarget(snapshot, "mock-art"), mp3)?.message).toContain(
      'cannot produce "mp3"',
    );
    expect(sureRefusal(services, resolveTarget(snapshot, "art"), mp3)).toBeUndefined();
  });
});
