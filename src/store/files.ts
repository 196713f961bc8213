import type { Statement } from "better-sqlite3";
import type { DB } from "./db.js";

export interface MediaFile {
  id: string;
  account_id: string;
  content_type: string;
  bytes: Buffer;
  created_at: number;
}

export interface NewMediaFile {
  id: string;
  accountId: string;
  contentType: string;
  bytes: Uint8Array;
  now: number;
}

/**
 * Media the gateway serves by URL (images asked for with `response_format: "url"`), readable only
 * with a key of the account that made it.
 */
export interface FilesRepository {
  save(file: NewMediaFile): Promise<void>;
  /** A file of this account; another account's id reads as unknown. */
  find(id: string, accountId: string): Promise<MediaFile | undefined>;
}

export class SqliteFiles implements FilesRepository {
  private readonly insert: Statement;
  private readonly byId: Statement;

  constructor(db: DB) {
    this.insert = db.prepare(
      "INSERT INTO media (id, account_id, content_type, bytes, created_at) VALUES (?, ?, ?, ?, ?)",
    );
    this.byId = db.prepare("SELECT * FROM media WHERE id = ? AND account_id = ?");
  }

  async save(file: NewMediaFile): Promise<void> {
    this.insert.run(file.id, file.accountId, file.contentType, Buffer.from(file.bytes), file.now);
  }

  async find(id: string, accountId: string): Promise<MediaFile | undefined> {
    return this.byId.get(id, accountId) as MediaFile | undefined;
  }
}
