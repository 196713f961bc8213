import type { GoneSignal } from "../../time/gone-signal.js";
import { UnsupportedRequest, UpstreamFailure } from "../../wire/upstream-failure.js";
import type { UpstreamHttp } from "../http-upstream.js";
import {
  type Attempt,
  type Embeddings,
  type EmbedRequest,
  embeddingBase64,
  type ProviderContext,
} from "../provider.js";
import { geminiHeaders, methodUrl, modelName } from "./endpoints.js";

/** The most inputs Google takes in one `batchEmbedContents` call. */
const maxBatch = 100;

/**
 * The inputs in `batchEmbedContents` calls of at most a hundred each, answered in OpenAI's list
 * shape. Gemini reports no tokens for embeddings, so the input is billed by the gateway's estimate.
 */
export async function geminiEmbed(
  { http }: ProviderContext,
  attempt: Attempt,
  req: EmbedRequest,
): Promise<Embeddings> {
  const input = req.body.input;
  if (Array.isArray(input) && input.some((item) => typeof item !== "string"))
    throw new UnsupportedRequest("Gemini embeds text; token arrays cannot be sent to it.");
  const texts = req.inputs.map((item) => item.text);
  const batches: string[][] = [];
  for (let at = 0; at < texts.length; at += maxBatch) batches.push(texts.slice(at, at + maxBatch));
  const answers = await Promise.all(
    batches.map((batch) => embedBatch(http, attempt, batch, req.body.dimensions, req.signal)),
  );
  const base64 = req.body.encoding_format === "base64";
  const tokens = req.inputs.reduce((sum, item) => sum + item.tokens, 0);
  return {
    body: {
      object: "list",
      data: answers.flat().map((values, index) => ({
        object: "embedding",
        index,
        embedding: base64 ? embeddingBase64(Float32Array.from(values)) : values,
      })),
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    },
  };
}

async function embedBatch(
  http: UpstreamHttp,
  attempt: Attempt,
  texts: string[],
  dimensions: number | undefined,
  signal: GoneSignal,
): Promise<number[][]> {
  const model = modelName(attempt);
  const answer = await http.postJson<{ embeddings?: { values?: unknown }[] }>(
    methodUrl(attempt, "batchEmbedContents"),
    geminiHeaders(attempt),
    JSON.stringify({
      requests: texts.map((text) => ({
        model,
        content: { parts: [{ text }] },
        ...(dimensions !== undefined ? { outputDimensionality: dimensions } : {}),
      })),
    }),
    signal,
    attempt.provider,
  );
  const vectors = (answer.embeddings ?? []).map((embedding) => embedding.values);
  if (vectors.length !== texts.length || !vectors.every(isVector))
    throw new UpstreamFailure("unavailable", 502);
  return vectors;
}

const isVector = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((x) => typeof x === "number");
