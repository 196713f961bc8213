import type { Statement } from "better-sqlite3";
import type { FilesRepository, NewStoredFile, StoredFile } from "../files.js";
import type { DB } from "./db.js";

export class SqliteFiles implements FilesRepository {
  private readonly insert: Statement;
  private readonly byId: Statement;

  constructor(db: DB) {
    this.insert = db.prepare(
      "INSERT INTO media (id, account_id, content_type, bytes, created_at) VALUES (?, ?, ?, ?, ?)",
    );
    this.byId = db.prepare("SELECT * FROM media WHERE id = ? AND account_id = ?");
  }

  async save(file: NewStoredFile): Promise<void> {
    this.insert.run(file.id, file.accountId, file.contentType, Buffer.from(file.bytes), file.now);
  }

  async find(id: string, accountId: string): Promise<StoredFile | undefined> {
    return this.byId.get(id, accountId) as StoredFile | undefined;
  }
}
