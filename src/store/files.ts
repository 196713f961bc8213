/** A file the gateway serves at `/v1/files/{id}` (an image asked for as a URL). */
export interface StoredFile {
  id: string;
  account_id: string;
  content_type: string;
  bytes: Buffer;
  created_at: number;
}

export interface NewStoredFile {
  id: string;
  accountId: string;
  contentType: string;
  bytes: Uint8Array;
  now: number;
}

/**
 * Files the gateway serves by URL (images asked for with `response_format: "url"`), readable only
 * with a key of the account that made it.
 */
export interface FilesRepository {
  save(file: NewStoredFile): Promise<void>;
  /** A file of this account; another account's id reads as unknown. */
  find(id: string, accountId: string): Promise<StoredFile | undefined>;
}
