import type { Context } from "hono";
import type { StoredFile } from "../../store/files.js";
import { newId } from "../../store/secrets.js";
import type { Services } from "../compose/services.js";
import { GatewayError } from "../errors.js";
import type { Handler } from "../http/context.js";
import { requestHeader } from "../http/request.js";

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
 * not revealed. The bare path asked for JSON alone is the SDKs' `files.retrieve` (openai) and
 * `files.retrieveMetadata` (Anthropic), which read the file's description in their provider's
 * shape; a browser or a download asks for anything else and gets the bytes.
 */
export function fileHandler(services: Pick<Services, "repos">): Handler {
  return async (c) => {
    const id = c.req.param("id") ?? "";
    const file = await services.repos.files.find(id, c.get("auth").key.account_id);
    if (!file) throw fileNotFound("file", id);
    if (!c.req.path.endsWith("/content") && asksForJsonOnly(requestHeader(c, "accept")))
      return c.json(
        requestHeader(c, "anthropic-version") === undefined
          ? openaiFileObject(file)
          : anthropicFileMetadata(file),
      );
    return privateBytesResponse(c, file.content_type, file.bytes);
  };
}

function asksForJsonOnly(accept: string | undefined): boolean {
  const types = (accept ?? "").split(",").map((type) => type.split(";")[0]?.trim().toLowerCase());
  return types.length > 0 && types.every((type) => type === "application/json");
}

/** The name a file is given: its id, with its content type's subtype as the extension. */
const fileName = (file: StoredFile) =>
  `${file.id}.${file.content_type.split("/")[1]?.split(/[;+]/)[0] ?? "bin"}`;

/** OpenAI's `FileObject`; the gateway's files are outputs it made for the account. */
function openaiFileObject(file: StoredFile): object {
  return {
    id: file.id,
    object: "file",
    bytes: file.bytes.length,
    created_at: Math.floor(file.created_at / 1000),
    filename: fileName(file),
    purpose: "user_data",
    status: "processed",
  };
}

/** Anthropic's `FileMetadata`. */
function anthropicFileMetadata(file: StoredFile): object {
  return {
    id: file.id,
    type: "file",
    filename: fileName(file),
    mime_type: file.content_type,
    size_bytes: file.bytes.length,
    created_at: new Date(file.created_at).toISOString(),
    downloadable: true,
  };
}
