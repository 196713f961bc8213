import type pg from "pg";
import type { FilesRepository, NewStoredFile, StoredFile } from "../files.js";

/** Media served by URL, on Postgres (see FilesRepository). */
export class PostgresFiles implements FilesRepository {
  constructor(private readonly pool: pg.Pool) {}

  async save(file: NewStoredFile): Promise<void> {
    await this.pool.query({
      name: "media_insert",
      text: "INSERT INTO media (id, account_id, content_type, bytes, created_at) VALUES ($1, $2, $3, $4, $5)",
      values: [file.id, file.accountId, file.contentType, Buffer.from(file.bytes), file.now],
    });
  }

  async find(id: string, accountId: string): Promise<StoredFile | undefined> {
    const result = await this.pool.query<StoredFile>({
      name: "media_find",
      text: "SELECT * FROM media WHERE id = $1 AND account_id = $2",
      values: [id, accountId],
    });
    return result.rows[0];
  }
}
