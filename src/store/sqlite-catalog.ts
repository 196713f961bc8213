import type { DB } from "./db.js";
import type { Catalog, CatalogRepository, ModelRow, ProviderRow, TierRow } from "./types.js";

/**
 * The catalog on SQLite, read whole into memory when first needed: its rows change only when a
 * config or an admin call writes them, and the request path reads them on every request.
 */
export class SqliteCatalog implements CatalogRepository {
  private catalog: Catalog | null = null;
  /** Provider API keys from the config: in memory only, never in the database. */
  private readonly providerKeys = new Map<string, readonly string[]>();

  constructor(private readonly db: DB) {}

  /** After a config is applied: read again when next needed. */
  forget(): void {
    this.catalog = null;
  }

  getCatalog(): Catalog {
    if (!this.catalog) this.catalog = loadCatalog(this.db, this.providerKeys);
    return this.catalog;
  }

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

  providersWithoutKeys(): string[] {
    return [...this.getCatalog().providers.values()]
      .filter((provider) => provider.api_key_count > 0 && provider.api_keys.length === 0)
      .map((provider) => provider.id);
  }
}

function loadCatalog(db: DB, providerKeys: Map<string, readonly string[]>): Catalog {
  const providers = new Map(
    (db.prepare("SELECT * FROM providers").all() as Omit<ProviderRow, "api_keys">[]).map(
      (provider) => [provider.id, { ...provider, api_keys: providerKeys.get(provider.id) ?? [] }],
    ),
  );
  const models = new Map(
    (db.prepare("SELECT * FROM models ORDER BY name").all() as ModelRow[]).map((model) => [
      model.name,
      model,
    ]),
  );
  const routes = new Map(
    (
      db.prepare("SELECT * FROM routes ORDER BY name").all() as {
        name: string;
        steps_json: string;
      }[]
    ).map((route) => [route.name, JSON.parse(route.steps_json) as string[]]),
  );
  const tiers = new Map(
    (db.prepare("SELECT * FROM tiers ORDER BY rank").all() as TierRow[]).map((tier) => [
      tier.name,
      tier,
    ]),
  );
  return { providers, models, routes, tiers };
}
