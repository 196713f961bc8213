import type { Context } from "hono";
import type { DB } from "../../store/db.js";
import { newId } from "../../store/secrets.js";
import type { Handler } from "../app-env.js";
import { GatewayError } from "../errors.js";
import type { Services } from "../services.js";

/**
 * Media the gateway serves by URL (images asked for with `response_format: "url"`), kept in the
 * `media` table and readable only with a key of the account that made it.
 */
export interface MediaFile {
  id: string;
  account_id: string;
  content_type: string;
  bytes: Buffer;
  created_at: number;
}

const statements = new WeakMap<DB, ReturnType<typeof prepare>>();

function prepare(db: DB) {
  return {
    insert: db.prepare(
      "INSERT INTO media (id, account_id, content_type, bytes, created_at) VALUES (?, ?, ?, ?, ?)",
    ),
    byId: db.prepare("SELECT * FROM media WHERE id = ? AND account_id = ?"),
  };
}

function queries(s: Services) {
  let prepared = statements.get(s.store.db);
  if (!prepared) {
    prepared = prepare(s.store.db);
    statements.set(s.store.db, prepared);
  }
  return prepared;
}

export function saveMediaFile(
  s: Services,
  accountId: string,
  contentType: string,
  bytes: Uint8Array,
): string {
  const id = newId("file");
  queries(s).insert.run(id, accountId, contentType, Buffer.from(bytes), s.options.now());
  return id;
}

export function fileNotFound(kind: string, id: string): GatewayError {
  return new GatewayError(404, "not_found", `No ${kind} with id "${id}" exists for this account.`);
}

/** Bytes with their content type, private to the key's account. */
export function mediaResponse(c: Context, contentType: string, bytes: Uint8Array): Response {
  return c.body(new Uint8Array(bytes), 200, {
    "content-type": contentType,
    "content-length": String(bytes.length),
    "cache-control": "private, max-age=3600",
  });
}

/**
 * GET /v1/files/{id} and /v1/files/{id}/content (OpenAI's files API serves bytes at /content; image
 * URLs use the bare path). A file of another account is as unknown as a missing one: existence is
 * not revealed.
 */
export function fileHandler(s: Services): Handler {
  return (c) => {
    const id = c.req.param("id") ?? "";
    const file = queries(s).byId.get(id, c.get("auth").key.account_id) as MediaFile | undefined;
    if (!file) throw fileNotFound("file", id);
    return mediaResponse(c, file.content_type, file.bytes);
  };
}
