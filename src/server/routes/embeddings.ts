import { z } from "zod";
import type { ModelRow } from "../../store/types.js";
import type { Services } from "../compose/services.js";
import { forMediaWire, forModality, resolveTarget } from "../dispatch/resolve.js";
import { readJsonWithSize } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { Handler } from "../http/context.js";
import type { Attempt, Embeddings, ProviderContext } from "../providers/provider.js";
import { provide } from "../providers/registry.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { estimateTokens } from "../wire/usage.js";
import { serveAdmitted } from "./admitted.js";

const tokenArray = z.array(z.number().int().nonnegative()).min(1);

/** OpenAI's embeddings body; other fields (user ...) pass through to openai wires. */
export const embeddingBody = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string().min(1),
    z.array(z.string().min(1)).min(1).max(2048),
    tokenArray,
    z.array(tokenArray).min(1).max(2048),
  ]),
  dimensions: z.number().int().min(1).max(8192).optional(),
  encoding_format: z.enum(["float", "base64"]).optional(),
});
type EmbeddingBody = z.infer<typeof embeddingBody>;

/** POST /v1/embeddings: priced by input tokens (`price_input_per_mtok`). */
export function embeddingsHandler(services: Services): Handler {
  return async (c) => {
    const { data: body, bytes } = await readJsonWithSize(c, embeddingBody);
    const target = forMediaWire(
      services,
      forModality(resolveTarget(services.store.getCatalog(), body.model), "embedding"),
      "embedding",
    );
    const signal = clientGone(c);
    // Each input is bounded by the context window, not the batch: eight inputs of 7,500 tokens
    // each fit a model of 8,192 and are billed 60,000.
    const inputCount = inputTexts(body.input).length;
    const worstCase = (m: ModelRow) => ({
      inputTokens: Math.min(Math.ceil(bytes / 2), m.context_window * inputCount),
      outputTokens: 0,
      units: 0,
    });
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "embeddings", worstCase, signal },
      (attempt) => embed(services, attempt, body, signal),
      (result) => ({ usage: { input_tokens: result.inputTokens, output_tokens: 0 } }),
    );
    return c.json({ ...result.body, model: body.model });
  };
}

async function embed(
  services: ProviderContext,
  attempt: Attempt,
  body: EmbeddingBody,
  signal: GoneSignal,
): Promise<Embeddings & { inputTokens: number }> {
  const inputs = inputTexts(body.input);
  const answer = await provide(attempt.provider, "embedding")(services, attempt, {
    body,
    inputs,
    signal,
  });
  const estimate = inputs.reduce((sum, input) => sum + input.tokens, 0);
  return { ...answer, inputTokens: answer.reportedTokens ?? estimate };
}

/** Each input as the text its vector is seeded by, and its tokens (a token array counts itself). */
function inputTexts(input: EmbeddingBody["input"]): { text: string; tokens: number }[] {
  if (typeof input === "string") return [{ text: input, tokens: estimateTokens(input) }];
  if (input.every((item) => typeof item === "number")) {
    return [{ text: JSON.stringify(input), tokens: input.length }];
  }
  return input.map((item) =>
    typeof item === "string"
      ? { text: item, tokens: estimateTokens(item) }
      : { text: JSON.stringify(item), tokens: item.length },
  );
}
