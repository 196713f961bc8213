import type pg from "pg";
import { CatalogMemory } from "../catalog-memory.js";
import type { BaseUrlColumns } from "../provider-urls.js";
import type { SecretBox } from "../secret-box.js";
import type { Catalog, CatalogRepository, ModelRow, StoredProviderRow, TierRow } from "../types.js";

/**
 * The catalog on Postgres, held in memory: read whole at start, and again whenever a gateway
 * announces a change to it (a config applied). The request path reads it on every request.
 */
export class PostgresCatalog implements CatalogRepository {
  private readonly memory: CatalogMemory;

  /** `secrets` opens the base URLs sealed in provider rows. */
  constructor(
    private readonly pool: pg.Pool,
    secrets: SecretBox,
  ) {
    this.memory = new CatalogMemory(secrets);
  }

  async readAll(): Promise<void> {
    // Names in SQLite's order: byte by byte, whatever the database's collation.
    const [providers, models, routes, tiers] = await Promise.all([
      this.pool.query<StoredProviderRow>(`SELECT * FROM providers ORDER BY id COLLATE "C"`),
      this.pool.query<ModelRow>(`SELECT * FROM models ORDER BY name COLLATE "C"`),
      this.pool.query<{ name: string; steps_json: string }>(
        `SELECT * FROM routes ORDER BY name COLLATE "C"`,
      ),
      this.pool.query<TierRow>(`SELECT * FROM tiers ORDER BY rank, name COLLATE "C"`),
    ]);
    this.memory.read({
      providers: providers.rows,
      models: models.rows,
      routes: routes.rows,
      tiers: tiers.rows,
    });
  }

  getCatalog(): Catalog {
    return this.memory.getCatalog();
  }

  setProviderKeys(providerId: string, keys: readonly string[]): void {
    this.memory.setProviderKeys(providerId, keys);
  }

  providersWithoutKeys(): string[] {
    return this.memory.providersWithoutKeys();
  }

  baseUrlColumns(providerId: string, url: string | null): BaseUrlColumns {
    return this.memory.baseUrlColumns(providerId, url);
  }
}
