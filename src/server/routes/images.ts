import type { Context } from "hono";
import { z } from "zod";
import type { AppEnv } from "../app-env.js";
import { admit, settleDelivered } from "../billing/admission.js";
import { forModality, resolveTarget } from "../dispatch/resolve.js";
import type { Attempt } from "../dispatch/types.js";
import { badRequest } from "../errors.js";
import { clientSignal } from "../http/client-signal.js";
import { readJsonWithSize } from "../http/json-body.js";
import { nodeIncoming } from "../http/node-bindings.js";
import { traceOf } from "../http/request-trace.js";
import { MAX_IMAGE_SIDE, parseSize } from "../media/index.js";
import { mockImages, mockMediaPreamble } from "../providers/media-mock.js";
import { type ImageDatum, openaiImages, type UpstreamImages } from "../providers/media-openai.js";
import { forMediaWire } from "../providers/media-wires.js";
import type { Services } from "../services.js";
import { failAdmission } from "./completions.js";
import { saveMediaFile } from "./files.js";
import { gatewayUrl } from "./media.js";

/** OpenAI Images. Extra fields (quality, style, background ...) pass through to openai wires. */
const imageBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  n: z.number().int().min(1).max(10).optional(),
  size: z.string().optional(),
  // gpt-image models always answer b64_json, and a gateway URL needs the key to fetch, so
  // b64_json is the default here (DALL-E's default was url).
  response_format: z.enum(["b64_json", "url"]).optional(),
});
type ImageBody = z.infer<typeof imageBody>;

const defaultSize = "1024x1024";

/** POST /v1/images/generations, priced per image (`price_per_unit`). */
export function imagesRoute(s: Services) {
  return async (c: Context<AppEnv>) => {
    const { data: body } = await readJsonWithSize(c, imageBody);
    const size = body.size ?? defaultSize;
    if (!parseSize(size)) {
      throw badRequest(
        `Invalid request: size: "${size}" is not WIDTHxHEIGHT with sides up to ${MAX_IMAGE_SIDE}, or "auto".`,
      );
    }
    const n = body.n ?? 1;
    const format = body.response_format ?? "b64_json";
    const target = forMediaWire(
      s,
      forModality(resolveTarget(s.store.getCatalog(), body.model), "image"),
      "image",
    );
    const signal = clientSignal(c);
    const admission = await admit(s, {
      key: c.get("auth").key,
      target,
      endpoint: "images.generations",
      accountRpm: false,
      worstCase: () => ({ inputTokens: 0, outputTokens: 0, units: n }),
      stream: false,
      signal,
      trace: traceOf(nodeIncoming(c)),
    });
    try {
      const { result, attempt } = await s.dispatcher.dispatchWith(
        target,
        signal,
        { byok: admission.byok, byokOnly: admission.byokOnly },
        async (attempt) => ({
          value: await generate(s, attempt, body, size, n, signal),
          streaming: false,
        }),
      );
      const stored = { accountId: admission.account.id, contentType: imageType(body) };
      const data = format === "url" ? result.data.map((d) => asUrl(s, c, stored, d)) : result.data;
      await settleDelivered(s, admission, {
        status: 200,
        usage: { input_tokens: 0, output_tokens: 0 },
        units: Math.min(data.length, n),
        model: attempt.model,
        providerId: attempt.provider.id,
        byokServed: attempt.credential.source === "byok",
      });
      return c.json({
        created: result.created ?? Math.floor(s.options.now() / 1000),
        data,
        ...(result.usage === undefined ? {} : { usage: result.usage }),
      });
    } catch (err) {
      throw failAdmission(s, admission, err);
    }
  };
}

async function generate(
  s: Services,
  attempt: Attempt,
  body: ImageBody,
  size: string,
  n: number,
  signal: AbortSignal,
): Promise<UpstreamImages> {
  if (attempt.provider.wire === "openai") return openaiImages(s.http, attempt, body, signal);
  await mockMediaPreamble(attempt.provider, body.prompt, signal);
  const pictures = mockImages(body.prompt, size, n);
  return {
    data: pictures.map((png) => ({
      b64_json: png.toString("base64"),
      revised_prompt: body.prompt,
    })),
  };
}

/** gpt-image models may be asked for jpeg or webp; everything else, the mock included, is PNG. */
function imageType(body: ImageBody): string {
  const format = body.output_format;
  if (format === "jpeg" || format === "jpg") return "image/jpeg";
  if (format === "webp") return "image/webp";
  return "image/png";
}

/** A picture that came as base64 is stored and served from /v1/files; provider URLs stay. */
function asUrl(
  s: Services,
  c: Context<AppEnv>,
  stored: { accountId: string; contentType: string },
  datum: ImageDatum,
): ImageDatum {
  if (datum.url || !datum.b64_json) return datum;
  const { b64_json, ...rest } = datum;
  const id = saveMediaFile(
    s,
    stored.accountId,
    stored.contentType,
    Buffer.from(b64_json, "base64"),
  );
  return { ...rest, url: gatewayUrl(c, `/v1/files/${id}`) };
}
