import type { Catalog, ModelRow, ProviderRow, TierRow } from "./types.js";

/** The catalog's rows as a database holds them: provider keys are added in memory. */
export interface CatalogRows {
  providers: Omit<ProviderRow, "api_keys">[];
  models: ModelRow[];
  routes: { name: string; steps_json: string }[];
  tiers: TierRow[];
}

/**
 * The catalog both backends hold in memory, built from their rows, and the provider API keys the
 * config gave (never in a database). Each backend reads its rows its own way and hands them over.
 */
export class CatalogMemory {
  private rows: CatalogRows = { providers: [], models: [], routes: [], tiers: [] };
  private catalog: Catalog | null = null;
  private readonly providerKeys = new Map<string, readonly string[]>();

  read(rows: CatalogRows): void {
    this.rows = rows;
    this.catalog = null;
  }

  getCatalog(): Catalog {
    if (!this.catalog) this.catalog = build(this.rows, this.providerKeys);
    return this.catalog;
  }

  /** A config's provider keys; the same keys keep their array, so key pools keep their state. */
  setProviderKeys(providerId: string, keys: readonly string[]): void {
    const current = this.providerKeys.get(providerId);
    if (
      current &&
      current.length === keys.length &&
      current.every((key, index) => key === keys[index])
    )
      return;
    this.providerKeys.set(providerId, [...keys]);
    this.catalog = null;
  }

  /** Providers whose config gave API keys that this process was not given. */
  providersWithoutKeys(): string[] {
    return [...this.getCatalog().providers.values()]
      .filter((provider) => provider.api_key_count > 0 && provider.api_keys.length === 0)
      .map((provider) => provider.id);
  }
}

function build(rows: CatalogRows, providerKeys: Map<string, readonly string[]>): Catalog {
  return {
    providers: new Map(
      rows.providers.map((provider) => [
        provider.id,
        { ...provider, api_keys: providerKeys.get(provider.id) ?? [] },
      ]),
    ),
    models: new Map(rows.models.map((model) => [model.name, model])),
    routes: new Map(
      rows.routes.map((route) => [route.name, JSON.parse(route.steps_json) as string[]]),
    ),
    tiers: new Map(rows.tiers.map((tier) => [tier.name, tier])),
  };
}
