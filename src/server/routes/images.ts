import type { Context } from "hono";
import { z } from "zod";
import type { Services } from "../compose/services.js";
import { forMediaWire, forModality, resolveTarget, sureRefusal } from "../dispatch/resolve.js";
import { badRequest, GatewayError } from "../errors.js";
import { formFields, readForm, readJson } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import { gatewayUrl } from "../http/request.js";
import { MAX_IMAGE_SIDE, parseSize } from "../media/png.js";
import type { ImageDatum, UploadedFile, UpstreamImages } from "../providers/provider.js";
import { provide } from "../providers/registry.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";
import { perUnit, serveAdmitted } from "./admitted.js";
import { saveServedFile } from "./files.js";

/** OpenAI Images. Extra fields (quality, style, background ...) pass through to openai wires. */
export const imageBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  n: z.number().int().min(1).max(10).optional(),
  size: z.string().optional(),
  // gpt-image models always answer b64_json, and a gateway URL needs the key to fetch, so
  // b64_json is the default here (DALL-E's default was url).
  response_format: z.enum(["b64_json", "url"]).optional(),
});

const defaultSize = "1024x1024";

/** POST /v1/images/generations, priced per image (`price_per_unit`). */
export function imagesHandler(services: Services): Handler {
  return async (c) => {
    const body = await readJson(c, imageBody);
    const size = checkedSize(body.size ?? defaultSize);
    const n = body.n ?? 1;
    const target = forMediaWire(
      services,
      forModality(resolveTarget(services.store.getCatalog(), body.model), "image"),
      "image",
    );
    const signal = clientGone(c);
    const stored = { accountId: c.get("auth").accountId, contentType: imageType(body) };
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "images.generations", worstCase: perUnit(n), signal },
      async (attempt) =>
        delivered(
          services,
          c,
          stored,
          body.response_format,
          await provide(attempt.provider, "image")(services, attempt, { body, size, n, signal }),
        ),
      (result) => ({ units: Math.min(result.data.length, n) }),
    );
    return c.json(result);
  };
}

/** What the client gets: its response_format (b64_json by default), a created time, usage if any. */
async function delivered(
  services: Services,
  c: Context<AppEnv>,
  stored: { accountId: string; contentType: string },
  format: "b64_json" | "url" | undefined,
  result: UpstreamImages,
) {
  // An answer without a picture delivered nothing: a provider failure, free, and a route's next
  // step may draw it (the per-request price is not owed for an empty list).
  if (result.data.length === 0) throw new UpstreamFailure("unavailable", 502);
  const data =
    format === "url"
      ? await Promise.all(result.data.map((d) => asUrl(services, c, stored, d)))
      : result.data;
  return {
    created: result.created ?? Math.floor(services.options.now() / 1000),
    data,
    ...(result.usage === undefined ? {} : { usage: result.usage }),
  };
}

function checkedSize(size: string): string {
  if (!parseSize(size)) {
    throw badRequest(
      `Invalid request: size: "${size}" is not WIDTHxHEIGHT with sides up to ${MAX_IMAGE_SIDE}, or "auto".`,
    );
  }
  return size;
}

// ---- edits ------------------------------------------------------------------

/** OpenAI's limit per uploaded image for edits. */
const maxEditImageBytes = 50 * 1024 * 1024;

const editFields = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  n: z.coerce.number().int().min(1).max(10).optional(),
  size: z.string().optional(),
  response_format: z.enum(["b64_json", "url"]).optional(),
});

interface EditRequest {
  fields: Record<string, string>;
  body: z.infer<typeof editFields>;
  images: UploadedFile[];
  mask: UploadedFile | undefined;
}

/**
 * POST /v1/images/edits: multipart image(s), prompt and optional mask, priced per image. Models
 * of modality `edit` serve it, and so do `image` models (one model name draws and edits, as
 * OpenAI's do).
 */
export function imageEditsHandler(services: Services): Handler {
  return async (c) => {
    const req = await readEditForm(c);
    const { body } = req;
    if (body.size !== undefined) checkedSize(body.size);
    const n = body.n ?? 1;
    const target = forMediaWire(
      services,
      forModality(resolveTarget(services.store.getCatalog(), body.model), "edit", [
        "edit",
        "image",
      ]),
      "edit",
    );
    // A picture no candidate can read is a 400 before any money is held.
    const refusal = sureRefusal(services, target, (p) => p.refuses?.edit?.(req));
    if (refusal) throw refusal;
    const signal = clientGone(c);
    const stored = { accountId: c.get("auth").accountId, contentType: imageType(body) };
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "images.edits", worstCase: perUnit(n), signal },
      async (attempt) =>
        delivered(
          services,
          c,
          stored,
          body.response_format,
          await provide(attempt.provider, "edit")(services, attempt, {
            fields: req.fields,
            prompt: req.body.prompt,
            size: req.body.size,
            images: req.images,
            mask: req.mask,
            n,
            signal,
          }),
        ),
      (result) => ({ units: Math.min(result.data.length, n) }),
    );
    return c.json(result);
  };
}

async function readEditForm(c: Context<AppEnv>): Promise<EditRequest> {
  const form = await readForm(c, "the image in a field named image and a prompt");
  const entries = [...form.getAll("image"), ...form.getAll("image[]")];
  const images = entries.filter((f): f is FormFile => typeof f !== "string");
  if (images.length === 0 || images.length !== entries.length) {
    throw badRequest("Invalid request: image: required; send the image as a multipart file field.");
  }
  const maskField = form.get("mask");
  if (typeof maskField === "string") {
    throw badRequest("Invalid request: mask: send the mask as a multipart file field.");
  }
  const fields = formFields(form);
  const parsed = editFields.safeParse(fields);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw badRequest(`Invalid request: ${issue.path.join(".") || "body"}: ${issue.message}`);
  }
  return {
    fields,
    body: parsed.data,
    images: await Promise.all(images.map((f) => uploaded(f, "image"))),
    mask: maskField === null ? undefined : await uploaded(maskField, "mask"),
  };
}

/** A multipart file field, as the form parser types it. */
type FormFile = Exclude<ReturnType<FormData["get"]>, string | null>;

async function uploaded(file: FormFile, field: string): Promise<UploadedFile> {
  if (file.size > maxEditImageBytes) {
    throw new GatewayError(
      413,
      "bad_request",
      `Invalid request: ${field}: larger than the limit of 50 MB.`,
    );
  }
  if (file.size === 0) throw badRequest(`Invalid request: ${field}: the uploaded file is empty.`);
  return {
    bytes: new Uint8Array(await file.arrayBuffer()),
    filename: file.name || `${field}.png`,
    contentType: file.type || "image/png",
  };
}

/** gpt-image models may be asked for jpeg or webp; everything else, the mock included, is PNG. */
function imageType(body: Record<string, unknown>): string {
  const format = body.output_format;
  if (format === "jpeg" || format === "jpg") return "image/jpeg";
  if (format === "webp") return "image/webp";
  return "image/png";
}

/** A picture that came as base64 is stored and served from /v1/files; provider URLs stay. */
async function asUrl(
  services: Services,
  c: Context<AppEnv>,
  stored: { accountId: string; contentType: string },
  datum: ImageDatum,
): Promise<ImageDatum> {
  if (datum.url || !datum.b64_json) return datum;
  const { b64_json, ...rest } = datum;
  const id = await saveServedFile(
    services,
    stored.accountId,
    stored.contentType,
    Buffer.from(b64_json, "base64"),
  );
  return { ...rest, url: gatewayUrl(c, services.options, `/v1/files/${id}`) };
}
