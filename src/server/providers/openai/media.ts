import { randomBytes } from "node:crypto";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import { joinUrl, parseJsonAnswer } from "../http-upstream.js";
import type {
  Attempt,
  CountResponsesTokensRequest,
  Embeddings,
  EmbedRequest,
  FormFields,
  ImageEditRequest,
  ImageRequest,
  ProviderContext,
  SpeechAudio,
  SpeechRequest,
  TranscribeRequest,
  UploadedFile,
  UpstreamImages,
  UpstreamTranscript,
} from "../provider.js";

/*
 * Media (and the Responses API's token count) over the `openai` wire: the client's body is
 * forwarded as-is with only `model` mapped,
 * and the answer comes back as the provider gave it. Failures arrive as UpstreamFailure from
 * UpstreamHttp, so the provider's own error body never reaches the client.
 */

function authHeaders(attempt: Attempt, contentType: string): Record<string, string> {
  const headers: Record<string, string> = { "content-type": contentType };
  if (attempt.credential.secret) headers.authorization = `Bearer ${attempt.credential.secret}`;
  return headers;
}

function endpoint(attempt: Attempt, path: string): string {
  return joinUrl(attempt.provider.base_url ?? "", path);
}

export async function openaiImages(
  { http }: ProviderContext,
  attempt: Attempt,
  { body, signal }: ImageRequest,
): Promise<UpstreamImages> {
  const json = await http.postJson<Partial<UpstreamImages>>(
    endpoint(attempt, "/images/generations"),
    authHeaders(attempt, "application/json"),
    JSON.stringify({ ...body, model: attempt.model.upstream_model }),
    signal,
    attempt.provider,
  );
  return imagesAnswer(json);
}

/** Image edits: the client's form forwarded as multipart, with only `model` mapped. */
export async function openaiImageEdits(
  { http }: ProviderContext,
  attempt: Attempt,
  req: ImageEditRequest,
): Promise<UpstreamImages> {
  const field = req.images.length > 1 ? "image[]" : "image";
  const files = req.images.map((file) => ({ field, file }));
  if (req.mask) files.push({ field: "mask", file: req.mask });
  const form = multipartBody({ ...req.fields, model: attempt.model.upstream_model }, files);
  const json = parseJsonAnswer<Partial<UpstreamImages>>(
    await http.postForBytes(
      endpoint(attempt, "/images/edits"),
      authHeaders(attempt, form.contentType),
      form.body,
      req.signal,
      attempt.provider,
    ),
  );
  return imagesAnswer(json);
}

/** Embeddings: the client's body forwarded with only `model` mapped; the answer as it came. */
export async function openaiEmbeddings(
  { http }: ProviderContext,
  attempt: Attempt,
  { body, signal }: EmbedRequest,
): Promise<Embeddings> {
  const json = await http.postJson<Record<string, unknown>>(
    endpoint(attempt, "/embeddings"),
    authHeaders(attempt, "application/json"),
    JSON.stringify({ ...body, model: attempt.model.upstream_model }),
    signal,
    attempt.provider,
  );
  if (!Array.isArray(json.data)) throw new UpstreamFailure("unavailable", 502);
  const reported = (json.usage as { prompt_tokens?: unknown } | undefined)?.prompt_tokens;
  return {
    body: json,
    reportedTokens: typeof reported === "number" && reported > 0 ? reported : undefined,
  };
}

export async function openaiSpeech(
  { http }: ProviderContext,
  attempt: Attempt,
  { body, signal }: SpeechRequest,
): Promise<SpeechAudio> {
  const bytes = await http.postForBytes(
    endpoint(attempt, "/audio/speech"),
    authHeaders(attempt, "application/json"),
    JSON.stringify({ ...body, model: attempt.model.upstream_model }),
    signal,
    attempt.provider,
  );
  // OpenAI's own default format is mp3.
  return { bytes, format: body.response_format ?? "mp3" };
}

export async function openaiTranscription(
  { http }: ProviderContext,
  attempt: Attempt,
  { fields, file, signal }: TranscribeRequest,
): Promise<UpstreamTranscript> {
  const form = multipartBody({ ...fields, model: attempt.model.upstream_model }, [
    { field: "file", file },
  ]);
  const answer = await http.postForBytes(
    endpoint(attempt, "/audio/transcriptions"),
    authHeaders(attempt, form.contentType),
    form.body,
    signal,
    attempt.provider,
  );
  const format = fields.response_format ?? "json";
  if (format !== "json" && format !== "verbose_json") {
    return { kind: "text", text: answer.toString("utf8") };
  }
  const body = parseJsonAnswer<Record<string, unknown>>(answer);
  return { kind: "json", body, seconds: reportedSeconds(body) };
}

/** OpenAI reports audio length as `usage.seconds` (json) or `duration` (verbose_json). */
function reportedSeconds(body: Record<string, unknown>): number | undefined {
  const usage = body.usage as { seconds?: unknown } | undefined;
  const value = typeof usage?.seconds === "number" ? usage.seconds : body.duration;
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** RFC 7578 form data in one buffer: text fields first (a list as one part per value), then the files. */
export function multipartBody(
  fields: FormFields,
  files: { field: string; file: UploadedFile }[],
): { body: Buffer; contentType: string } {
  const boundary = `----gateway${randomBytes(16).toString("hex")}`;
  const parts: Buffer[] = [];
  for (const [name, values] of Object.entries(fields)) {
    for (const value of typeof values === "string" ? [values] : values) {
      parts.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${quoted(name)}"\r\n\r\n${value}\r\n`,
        ),
      );
    }
  }
  for (const { field, file } of files) {
    parts.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${quoted(field)}"; filename="${quoted(file.filename)}"\r\n` +
          `Content-Type: ${file.contentType}\r\n\r\n`,
      ),
      Buffer.from(file.bytes),
      Buffer.from("\r\n"),
    );
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** Quotes and line breaks cannot appear inside a quoted header parameter. */
function quoted(value: string): string {
  return value.replace(/["\r\n]/g, "_");
}

/** An Images API answer, or a provider failure when it carries no `data` list. */
function imagesAnswer(json: Partial<UpstreamImages>): UpstreamImages {
  if (!Array.isArray(json.data)) throw new UpstreamFailure("unavailable", 502);
  return { created: json.created, data: json.data, usage: json.usage };
}

/** A Responses body counted by the provider's own `/responses/input_tokens`. */
export async function openaiCountResponsesTokens(
  { http }: ProviderContext,
  attempt: Attempt,
  { body, signal }: CountResponsesTokensRequest,
): Promise<number> {
  const answer = await http.postJson<{ input_tokens?: unknown }>(
    endpoint(attempt, "/responses/input_tokens"),
    authHeaders(attempt, "application/json"),
    JSON.stringify({ ...body, model: attempt.model.upstream_model }),
    signal,
    attempt.provider,
  );
  const tokens = answer.input_tokens;
  if (typeof tokens !== "number" || !Number.isInteger(tokens) || tokens < 0)
    throw new UpstreamFailure("unavailable", 502);
  return tokens;
}
