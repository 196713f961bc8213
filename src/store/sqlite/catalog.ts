import { CatalogMemory, type CatalogRows } from "../catalog-memory.js";
import type { BaseUrlColumns } from "../provider-urls.js";
import type { SecretBox } from "../secret-box.js";
import type { Catalog, CatalogRepository } from "../types.js";
import type { DB } from "./db.js";

/**
 * The catalog on SQLite, read whole into memory when first needed: its rows change only when a
 * config or an admin call writes them, and the request path reads them on every request.
 */
export class SqliteCatalog implements CatalogRepository {
  private readonly memory: CatalogMemory;
  private loaded = false;

  /** `secrets` opens the base URLs sealed in provider rows. */
  constructor(
    private readonly db: DB,
    secrets: SecretBox,
  ) {
    this.memory = new CatalogMemory(secrets);
  }

  /** After a config is applied: read again when next needed. */
  forget(): void {
    this.loaded = false;
  }

  getCatalog(): Catalog {
    if (!this.loaded) {
      this.memory.read(readRows(this.db));
      this.loaded = true;
    }
    return this.memory.getCatalog();
  }

  setProviderKeys(providerId: string, keys: readonly string[]): void {
    this.memory.setProviderKeys(providerId, keys);
  }

  providersWithoutKeys(): string[] {
    this.getCatalog();
    return this.memory.providersWithoutKeys();
  }

  baseUrlColumns(providerId: string, url: string | null): BaseUrlColumns {
    this.getCatalog();
    return this.memory.baseUrlColumns(providerId, url);
  }
}

function readRows(db: DB): CatalogRows {
  return {
    providers: db.prepare("SELECT * FROM providers").all() as CatalogRows["providers"],
    models: db.prepare("SELECT * FROM models ORDER BY name").all() as CatalogRows["models"],
    routes: db.prepare("SELECT * FROM routes ORDER BY name").all() as CatalogRows["routes"],
    tiers: db.prepare("SELECT * FROM tiers ORDER BY rank").all() as CatalogRows["tiers"],
  };
}
