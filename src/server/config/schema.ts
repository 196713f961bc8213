import { z } from "zod";
import { idrToMicro, MAX_IDR, MAX_MICRO, subMicroProblem } from "../../store/money.js";
import type { Subscription } from "../../store/types.js";
import { mockScriptSchema } from "../providers/mock-script.js";
import { hasCompletionsApi, modalities, wireNames } from "../providers/registry.js";

/**
 * Money in the config file and the APIs is whole or fractional IDR; it is stored as integer
 * micro-IDR, so an amount finer than that is refused rather than rounded.
 */
export const idr = z
  .number()
  .nonnegative()
  .max(MAX_IDR, `must be at most ${MAX_IDR} IDR (the most the gateway counts to the micro-IDR)`)
  .superRefine((value, ctx) => {
    // An amount out of range is named once, by the bound it passed.
    const problem = value >= 0 && value <= MAX_IDR ? subMicroProblem(value) : undefined;
    if (problem !== undefined) ctx.addIssue({ code: "custom", message: problem });
  });

const gatewayKeyValue = z
  .string()
  // As a provider key's: a newline from an env file is not part of the key.
  .trim()
  .regex(/^kn-[A-Za-z0-9_-]{16,}$/, "must start with kn- followed by at least 16 characters");

/**
 * The largest whole number a count or duration column holds on every backend (Postgres
 * `integer`): a larger one would pass on SQLite and fail the apply on Postgres.
 */
const maxStoredInt = 2 ** 31 - 1;

/** A whole number the database stores as a count or a duration. */
const storedInt = z
  .number()
  .int()
  .min(-maxStoredInt - 1, `must be at least ${-maxStoredInt - 1}`)
  .max(maxStoredInt, `must be at most ${maxStoredInt}`);

/** Requests per minute of an account (config and admin API). */
export const rpmLimit = storedInt.positive();

/** A time in milliseconds that a Node timer can wait (a longer one would fire at once). */
const timerMs = storedInt.positive();

/** Whole IDR per million tokens: a token then costs exactly that many micro-IDR. */
const tokenPrice = z
  .number()
  .nonnegative()
  .max(MAX_MICRO, `must be at most ${MAX_MICRO} IDR per million tokens`)
  .refine(
    Number.isInteger,
    "must be a whole number of IDR per million tokens (a token costs that many micro-IDR)",
  );

/** A mock's wait in milliseconds: a timer's, or none. */
const waitMs = storedInt.nonnegative();

/**
 * A provider's key: a newline from an env file or a space from a paste around it is dropped; what
 * is left goes into an HTTP header, so it is printable ASCII without spaces.
 */
export const providerKey = z
  .string()
  .trim()
  .min(1)
  .regex(
    /^[\x21-\x7e]*$/,
    "must be printable ASCII without spaces (a quote or dash pasted from a document?)",
  );

/** An HTTP(S) URL the gateway appends the API's paths to; a query string stays after them. */
const baseUrl = z
  .string()
  .url("must be a URL such as https://api.openai.com/v1")
  // `localhost:8080/v1` parses as a URL of the scheme `localhost:`.
  .refine((value) => !URL.canParse(value) || /^https?:$/.test(new URL(value).protocol), {
    message: "must start with http:// or https://",
  })
  // A proxy that wants Basic auth would answer every call 401 with no word of why: the gateway
  // sends the provider's key in its own header (OpenAI's is Authorization too), never these.
  .refine((value) => !carriesUserinfo(value), {
    message:
      "must not carry a user or password (user:password@): the gateway does not send them, so a proxy that needs them would refuse every call; remove them, and have the proxy let the gateway in by the provider key it sends (api_keys) or by its address",
  });

/** Whether a URL names a user or a password (`user:password@`), which the gateway never sends. */
export function carriesUserinfo(url: string): boolean {
  if (!URL.canParse(url)) return false;
  const { username, password } = new URL(url);
  return username !== "" || password !== "";
}

const mockOptions = z
  .object({
    latency_ms: waitMs.optional(),
    first_token_ms: waitMs.optional(),
    chunk_interval_ms: waitMs.optional(),
    fail_status: z.number().int().min(400).max(599).optional(),
    job_seconds: z.number().nonnegative().optional(),
  })
  .strict();

const providerSchema = z
  .object({
    id: z.string().min(1),
    wire: z.enum(wireNames),
    base_url: baseUrl.optional(),
    api_keys: z.array(providerKey).default([]),
    // The whole of a non-stream answer, and a stream's wait for its headers.
    timeout_ms: timerMs.default(60_000),
    // The longest gap between two pieces of an answer's body; absent, timeout_ms.
    idle_timeout_ms: timerMs.optional(),
    // The longest a streamed answer may run, from the request on.
    max_stream_ms: timerMs.optional(),
    // The largest server-sent event (or line) a stream may send.
    max_event_bytes: z.number().int().positive().optional(),
    max_concurrency: storedInt.positive().optional(),
    cooldown_ms: timerMs.optional(),
    responses_native: z.boolean().default(false),
    // POST /v1/completions goes to the provider's own Completions API as written (vLLM,
    // llama.cpp's server, DeepSeek's beta, Together, Fireworks), rather than through its chat.
    completions_native: z.boolean().default(false),
    // The output limit's field in a chat body the gateway writes (from a messages or Responses
    // client): OpenAI's reasoning models refuse max_tokens; absent, chosen by the base URL.
    max_tokens_field: z.enum(["max_tokens", "max_completion_tokens"]).optional(),
    // False: a stream's body asks for no usage (`stream_options.include_usage`), for a server
    // that refuses the field as unknown; its streams are billed the estimate of their text.
    stream_usage: z.boolean().optional(),
    // Whether a chat body the gateway writes marks prompt cache breakpoints (OpenAI's API takes
    // them; an OpenAI-compatible server may refuse the field); absent, chosen by the base URL.
    prompt_cache_breakpoints: z.boolean().optional(),
    // A tool this provider cannot run (a hosted or server tool): left out, or the request refused.
    unsupported_tools: z.enum(["omit", "reject"]).default("omit"),
    mock: mockOptions.optional(),
  })
  // base_url is required for the HTTP wires: checked in load.ts, so it shows beside other errors.
  .strict()
  .check((ctx) => {
    if (ctx.issues.length > 0 || !ctx.value.completions_native) return;
    if (!hasCompletionsApi(ctx.value))
      ctx.issues.push({
        code: "custom",
        path: ["completions_native"],
        message: `wire "${ctx.value.wire}" has no Completions API of its own: only an openai-wire provider (an OpenAI-compatible server such as vLLM or llama.cpp's) may set it`,
        input: ctx.value,
      });
  });

const modelSchema = z
  .object({
    name: z.string().min(1),
    provider: z.string().min(1),
    upstream_model: z.string().min(1).optional(),
    modality: z.enum(modalities).default("chat"),
    price_input_per_mtok: tokenPrice.default(0),
    price_output_per_mtok: tokenPrice.default(0),
    price_per_request: idr.default(0),
    price_per_unit: idr.default(0),
    subscribers_only: z.boolean().default(false),
    context_window: storedInt.positive().default(128_000),
    max_output_tokens: storedInt.positive().default(4096),
    free_token_budget: z
      .object({ tokens: z.number().int().positive(), window_seconds: storedInt.positive() })
      .strict()
      .optional(),
    active: z.boolean().default(true),
    // The provider's `unsupported_tools` for this model alone.
    unsupported_tools: z.enum(["omit", "reject"]).optional(),
  })
  .strict()
  .check((ctx) => {
    // On the model's fields as they parsed: a field refused on its own is named once, by that.
    if (ctx.issues.length > 0) return;
    for (const { field, message } of largestRequestProblems(ctx.value))
      ctx.issues.push({ code: "custom", path: [field], message, input: ctx.value });
  });

/**
 * A model whose largest request, a whole context window in and `max_output_tokens` out, would
 * cost more than the gateway counts exactly. The token price that weighs most is named (the other
 * too if it is too high on its own), with the most it may be at the model's bounds and other
 * prices. A request that asks for more (several answers, a larger output limit sent as it is)
 * holds its own worst case, which no balance or PAYG limit covers (MAX_IDR each).
 */
function largestRequestProblems(model: {
  price_input_per_mtok: number;
  price_output_per_mtok: number;
  price_per_request: number;
  context_window: number;
  max_output_tokens: number;
}): { field: string; message: string }[] {
  const perRequest = idrToMicro(model.price_per_request);
  const parts = [
    {
      field: "price_input_per_mtok",
      tokens: model.context_window,
      micro: model.price_input_per_mtok * model.context_window,
    },
    {
      field: "price_output_per_mtok",
      tokens: model.max_output_tokens,
      micro: model.price_output_per_mtok * model.max_output_tokens,
    },
  ].sort((a, b) => b.micro - a.micro);
  if (parts[0].micro + parts[1].micro + perRequest <= MAX_MICRO) return [];
  const named = parts[1].micro + perRequest > MAX_MICRO ? parts : [parts[0]];
  return named.map(({ field, tokens }) => {
    const other = parts.find((part) => part.field !== field)!.micro;
    const most = Math.floor((MAX_MICRO - perRequest - other) / tokens);
    return {
      field,
      message:
        `its largest request (context_window ${model.context_window} tokens in, max_output_tokens ${model.max_output_tokens} out, and price_per_request) would cost more than ${MAX_IDR} IDR, the most the gateway counts to the micro-IDR` +
        (most >= 0 ? `; at most ${most} with its other prices and bounds` : ""),
    };
  });
}

const routeSchema = z
  .object({
    name: z.string().min(1),
    steps: z.array(z.string().min(1)).min(1),
  })
  .strict();

const tierSchema = z
  .object({
    rank: storedInt.default(0),
    free_rpm: storedInt.nonnegative(),
    free_daily: storedInt.nonnegative(),
    burst_spacing_ms: storedInt.nonnegative().default(200),
    burst_queue: storedInt.nonnegative().default(8),
    min_topup_idr: idr.optional(),
  })
  .strict();

export const subscriptionSchema = z
  .object({
    plan: z.string().default("plan"),
    windows: z
      .array(
        z
          .object({
            name: z.string().min(1),
            seconds: storedInt.positive(),
            quota: storedInt.nonnegative(),
          })
          .strict(),
      )
      .min(1),
    models: z.array(z.string()).optional(),
    payg_fallback: z.boolean().default(false),
    free_fallback: z.boolean().default(false),
    tier: z.string().optional(),
    started_at: z.number().int().optional(),
  })
  .strict();

// The store's Subscription is what this schema parses to: a drift between the two fails to compile.
void (true satisfies SameType<z.infer<typeof subscriptionSchema>, Subscription>);

type SameType<A, B> =
  (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

export const paygSchema = z
  .object({
    enabled: z.boolean().default(true),
    limit_idr: idr,
    window_seconds: storedInt.positive().default(30 * 24 * 3600),
  })
  .strict();

const keySchema = z
  .object({
    id: z.string().min(1),
    label: z.string().default(""),
    kind: z.enum(["standard", "login", "shared"]).default("standard"),
    value: gatewayKeyValue,
  })
  .strict();

const byokSchema = z.object({ provider: z.string().min(1), key: providerKey }).strict();

const accountSchema = z
  .object({
    id: z.string().min(1),
    name: z.string().optional(),
    status: z.enum(["active", "suspended"]).default("active"),
    balance_idr: idr.default(0),
    payg: paygSchema.nullable().optional(),
    rpm_limit: rpmLimit.default(60),
    tier: z.string().default("free"),
    subscription: subscriptionSchema.nullable().optional(),
    byok: z.array(byokSchema).optional(),
    keys: z.array(keySchema).default([]),
  })
  .strict();

export const configSchema = z
  .object({
    providers: z.array(providerSchema).default([]),
    models: z.array(modelSchema).default([]),
    routes: z.array(routeSchema).default([]),
    tiers: z.record(z.string(), tierSchema).default({}),
    accounts: z.array(accountSchema).default([]),
    admin_keys: z.array(gatewayKeyValue).default([]),
    /**
     * Responses API state and conversations: how long a stored response or conversation is kept
     * after its last turn (default 30 days, as OpenAI keeps responses).
     */
    responses: z
      .object({ ttl_seconds: z.number().int().positive().optional() })
      .strict()
      .optional(),
    /**
     * Music and video jobs: how long a finished job (its media, its submission) is kept after it
     * finished (default 30 days); a job still queued or running is kept however old.
     */
    jobs: z.object({ ttl_seconds: z.number().int().positive().optional() }).strict().optional(),
    /** Scripted answers of every mock provider; `DELETE /api/admin/mock/script` comes back to these. */
    mock: z
      .object({ script: mockScriptSchema.default([]) })
      .strict()
      .optional(),
  })
  .strict();

export type GatewayConfig = z.infer<typeof configSchema>;
export type ConfigInput = z.input<typeof configSchema>;

/** Tiers every gateway has unless the config redefines them. */
export const builtInTiers: GatewayConfig["tiers"] = {
  free: { rank: 0, free_rpm: 20, free_daily: 50, burst_spacing_ms: 200, burst_queue: 8 },
  paid: {
    rank: 1,
    free_rpm: 60,
    free_daily: 1000,
    burst_spacing_ms: 100,
    burst_queue: 16,
    min_topup_idr: 10_000,
  },
};
