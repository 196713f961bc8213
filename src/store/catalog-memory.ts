import { type BaseUrlColumns, openedBaseUrl, sealedBaseUrl } from "./provider-urls.js";
import type { SecretBox } from "./secret-box.js";
import type { Catalog, ModelRow, ProviderRow, StoredProviderRow, TierRow } from "./types.js";

/**
 * The catalog's rows as a database holds them: provider keys are added in memory, base URLs
 * opened there.
 */
export interface CatalogRows {
  providers: StoredProviderRow[];
  models: ModelRow[];
  routes: { name: string; steps_json: string }[];
  tiers: TierRow[];
}

/**
 * The catalog both backends hold in memory, built from their rows, and the provider API keys the
 * config gave (never in a database). Each backend reads its rows its own way and hands them over.
 */
export class CatalogMemory {
  private rows: OpenedRows = { providers: [], models: [], routes: [], tiers: [] };
  private catalog: Catalog | null = null;
  private readonly providerKeys = new Map<string, readonly string[]>();
  /** Each provider's base URL as its row holds it and as it opened, by provider id. */
  private readonly storedUrls = new Map<string, { columns: BaseUrlColumns; url: string | null }>();

  constructor(private readonly secrets: SecretBox) {}

  read(rows: CatalogRows): void {
    this.storedUrls.clear();
    const providers = rows.providers.map(
      ({ base_url_sealed, base_url_shown, ...row }): Omit<ProviderRow, "api_keys"> => {
        const columns = { base_url: row.base_url, base_url_sealed, base_url_shown };
        let url = openedBaseUrl({ id: row.id, ...columns }, this.secrets);
        if (url === undefined) {
          // Only an altered row gets here: its calls fail here, never sent to a URL without
          // its credential.
          console.error(`provider ${row.id}: its sealed base_url does not open; its calls fail`);
          url = null;
        }
        this.storedUrls.set(row.id, { columns, url });
        return { ...row, base_url: url };
      },
    );
    this.rows = { ...rows, providers };
    this.catalog = null;
  }

  baseUrlColumns(providerId: string, url: string | null): BaseUrlColumns {
    const stored = this.storedUrls.get(providerId);
    if (stored && stored.url === url && stored.columns.base_url === null) return stored.columns;
    return sealedBaseUrl(providerId, url, this.secrets);
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

type OpenedRows = Omit<CatalogRows, "providers"> & { providers: Omit<ProviderRow, "api_keys">[] };

function build(rows: OpenedRows, providerKeys: Map<string, readonly string[]>): Catalog {
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
