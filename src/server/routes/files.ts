import type { Context } from "hono";
import { newId } from "../../store/secrets.js";
import type { Services } from "../compose/services.js";
import { GatewayError } from "../errors.js";
import type { Handler } from "../http/context.js";

/** Keeps bytes to serve at `/v1/files/{id}` (readable by its account only); returns the id. */
export async function saveServedFile(
  services: Pick<Services, "options" | "repos">,
  accountId: string,
  contentType: string,
  bytes: Uint8Array,
): Promise<string> {
  const id = newId("file");
  await services.repos.files.save({
    id,
    accountId,
    contentType,
    bytes,
    now: services.options.now(),
  });
  return id;
}

export function fileNotFound(kind: string, id: string): GatewayError {
  return new GatewayError(404, "not_found", `No ${kind} with id "${id}" exists for this account.`);
}

/** Bytes with their content type, private to the key's account. */
export function privateBytesResponse(c: Context, contentType: string, bytes: Uint8Array): Response {
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
export function fileHandler(services: Pick<Services, "repos">): Handler {
  return async (c) => {
    const id = c.req.param("id") ?? "";
    const file = await services.repos.files.find(id, c.get("auth").key.account_id);
    if (!file) throw fileNotFound("file", id);
    return privateBytesResponse(c, file.content_type, file.bytes);
  };
}
