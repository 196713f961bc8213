import { z } from "zod";
import type { LoopbackAnswer } from "../http/loopback.js";
import { modalities } from "../providers/registry.js";

/**
 * The gateway's models as MCP tools. Each tool call is the /v1 request it stands for, sent
 * through the gateway's own listener (`ToolCaller.send`, the loopback) with the caller's key and
 * address, so admission, limits, the hold, settlement, the price and the request log are the
 * /v1 route's own. A refusal of that route comes back as a tool result with `isError: true`
 * whose text names the spec's code (and the Retry-After seconds when the route sends them), so
 * an agent can read it; arguments that do not fit a tool's schema are a protocol error, raised
 * by the server before any request is made. Every result names the id of the /v1 request it was
 * served as (`_meta`, and a refusal's text), the id that request's row in the request log, its
 * line in serve's log and the dashboard have: the POST /mcp's own `x-request-id` is none of those.
 */

/** How a tool reaches the gateway for its caller. */
export interface ToolCaller {
  send(request: {
    method: "GET" | "POST";
    path: string;
    body?: Uint8Array | string;
    contentType?: string;
  }): Promise<LoopbackAnswer>;
  /** The gateway's URL of `path`, as the caller reaches the gateway. */
  link(path: string): string;
  /**
   * A file of the caller's account at `/v1/files/{id}`, read from the store rather than requested
   * again: an answer a `send` was charged for, which the call delivers even when the account is
   * suspended meanwhile (a new request of a suspended account is refused).
   */
  storedFile(id: string): Promise<{ contentType: string; bytes: Buffer } | undefined>;
}

/** A tool result, as MCP's `tools/call` answers. */
export interface ToolResult {
  [field: string]: unknown;
  content: ToolContent[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
}

export type ToolContent =
  | { type: "text"; text: string }
  | { type: "image"; data: string; mimeType: string }
  | { type: "audio"; data: string; mimeType: string }
  | { type: "resource_link"; uri: string; name: string; mimeType?: string; description?: string };

export interface GatewayTool {
  name: string;
  title: string;
  description: string;
  input: z.ZodType<Record<string, unknown>>;
  /** The shape of `structuredContent` when the call succeeds, for the tools that give one. */
  output?: z.ZodType<Record<string, unknown>>;
  run(args: Record<string, unknown>, caller: ToolCaller): Promise<ToolResult>;
}

/** A refusal of the /v1 route a tool call went through; becomes an `isError` result. */
class Refused extends Error {
  constructor(readonly result: ToolResult) {
    super("refused");
  }
}

/** The answer when the route accepted the request; its refusal is thrown as an `isError` result. */
function accepted(answer: LoopbackAnswer): LoopbackAnswer {
  if (answer.status < 400) return answer;
  throw new Refused(refusal(answer));
}

/** A gateway refusal in words an agent can act on: the spec's code, the status, when to retry. */
function refusal(answer: LoopbackAnswer): ToolResult {
  let code: string | undefined;
  let message = answer.body.toString("utf8").trim();
  const type = String(answer.headers["content-type"] ?? "");
  if (type.includes("json")) {
    try {
      const parsed = JSON.parse(message) as { error?: { code?: unknown; message?: unknown } };
      if (typeof parsed.error?.code === "string") code = parsed.error.code;
      if (typeof parsed.error?.message === "string") message = parsed.error.message;
    } catch {
      // Not the gateway's error shape: the text as it is.
    }
  }
  const retryAfter = Number(answer.headers["retry-after"]);
  const retry = Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter : undefined;
  const requestId = requestIdOf(answer);
  const http = `HTTP ${answer.status}`;
  const facts = [...(code ? [http] : []), ...(requestId ? [`request ${requestId}`] : [])];
  const text = [
    `${code ?? http}: ${message}`,
    ...(facts.length > 0 ? [`(${facts.join(", ")})`] : []),
    ...(retry !== undefined ? [`Retry after ${retry} seconds.`] : []),
  ].join(" ");
  return {
    content: [{ type: "text", text }],
    structuredContent: {
      error: {
        status: answer.status,
        ...(code ? { code } : {}),
        message,
        ...(retry !== undefined ? { retry_after_seconds: retry } : {}),
        ...(requestId ? { request_id: requestId } : {}),
      },
    },
    isError: true,
  };
}

/** The id the gateway gave the /v1 request this answers (its `x-request-id`). */
function requestIdOf(answer: LoopbackAnswer): string | undefined {
  const id = answer.headers["x-request-id"];
  return typeof id === "string" ? id : undefined;
}

/**
 * Where a result names the /v1 request it was served as, as MCP lets a result carry data of its
 * own (`_meta`, under a prefix of the server's).
 */
export const requestIdMeta = "model-gateway/request_id";

/**
 * What a refusal puts in `structuredContent` (`refusal`), whichever the tool: a tool's declared
 * output schema has it as its alternative, as an SDK client checks an error's structured content
 * against that schema too.
 */
export const refusalOutput = z.object({
  error: z.object({
    status: z.number().int(),
    code: z.string().optional(),
    message: z.string(),
    retry_after_seconds: z.number().optional(),
    request_id: z.string().optional(),
  }),
});

function json(answer: LoopbackAnswer): Record<string, unknown> {
  return JSON.parse(answer.body.toString("utf8")) as Record<string, unknown>;
}

const postJson = (caller: ToolCaller, path: string, body: unknown) =>
  caller.send({
    method: "POST",
    path,
    body: JSON.stringify(body),
    contentType: "application/json",
  });

/** The path of a URL the gateway handed out (its own /v1 file or job content). */
function pathOf(url: string): string {
  const parsed = new URL(url, "http://gateway.invalid");
  return parsed.pathname + parsed.search;
}

const mimeOf = (answer: LoopbackAnswer, fallback: string) =>
  String(answer.headers["content-type"] ?? fallback)
    .split(";")[0]!
    .trim();

// ---- the tools -------------------------------------------------------------------------------

const modelName = z
  .string()
  .min(1)
  .describe("A model or route name exactly as list_models shows it, e.g. the id of a chat model.");

interface ListedModel {
  id: string;
  type?: string;
  modality?: string;
  free?: boolean;
  subscribers_only?: boolean;
  pricing?: Record<string, unknown>;
}

function modelLine(m: ListedModel): string {
  const parts = [m.id, m.type === "route" ? "route" : (m.modality ?? "")];
  const price = m.pricing ?? {};
  const prices = [
    price.input_per_mtok ? `input ${price.input_per_mtok} IDR/Mtok` : "",
    price.output_per_mtok ? `output ${price.output_per_mtok} IDR/Mtok` : "",
    price.per_unit ? `${price.per_unit} IDR per unit` : "",
    price.per_request ? `${price.per_request} IDR per request` : "",
  ].filter(Boolean);
  if (m.free) prices.push("free");
  if (m.subscribers_only) prices.push("subscribers only");
  return `${parts.filter(Boolean).join(" - ")}${prices.length ? ` (${prices.join(", ")})` : ""}`;
}

const listModels: GatewayTool = {
  name: "list_models",
  title: "List models",
  description:
    "List the models and routes this gateway serves, with what each does (chat, image, speech, transcription, music, video, embedding) and its price in IDR. Call it first to pick a model for the other tools.",
  input: z.object({
    modality: z
      .enum(modalities)
      .optional()
      .describe("Only models of this kind; routes are listed with every kind."),
  }),
  async run(args, caller) {
    const listed = json(accepted(await caller.send({ method: "GET", path: "/v1/models" })));
    const all = (listed.data ?? []) as ListedModel[];
    const models = args.modality
      ? all.filter((m) => m.type === "route" || m.modality === args.modality)
      : all;
    return {
      content: [{ type: "text", text: models.map(modelLine).join("\n") || "No models match." }],
      structuredContent: { models },
    };
  },
};

const getQuota: GatewayTool = {
  name: "get_quota",
  title: "Read the account's quota",
  description:
    "Read what the account behind this key can still spend: IDR balance, pay-as-you-go limit, subscription windows and free-model allowances. Shared keys may not read it.",
  input: z.object({}),
  async run(_args, caller) {
    const quota = json(accepted(await caller.send({ method: "GET", path: "/v1/account/quota" })));
    return {
      content: [{ type: "text", text: JSON.stringify(quota, null, 2) }],
      structuredContent: quota,
    };
  },
};

const message = z.object({
  role: z.enum(["system", "user", "assistant"]),
  content: z.string(),
});

const chat: GatewayTool = {
  name: "chat",
  title: "Ask another model",
  description:
    "Send a prompt (or a whole conversation) to one of the gateway's chat models and get its reply as text: a second opinion, a review, a translation, a summary from a different model. Give `prompt` for one question, or `messages` for a conversation.",
  input: z
    .object({
      model: modelName,
      prompt: z
        .string()
        .min(1)
        .optional()
        .describe("The question or instruction, as one user message."),
      system: z.string().min(1).optional().describe("A system prompt to go before the prompt."),
      messages: z
        .array(message)
        .min(1)
        .optional()
        .describe("The conversation instead of `prompt`: role and text of each message, in order."),
      max_tokens: z
        .number()
        .int()
        .positive()
        .optional()
        .describe("The most tokens the reply may have (and the most it is charged for)."),
    })
    .refine((args) => (args.prompt === undefined) !== (args.messages === undefined), {
      message: "give exactly one of prompt or messages",
    })
    .refine((args) => args.system === undefined || args.messages === undefined, {
      message: "system goes with prompt; put a system message first in messages instead",
    }),
  async run(args, caller) {
    const messages = (args.messages as z.infer<typeof message>[] | undefined) ?? [
      ...(args.system ? [{ role: "system", content: args.system as string }] : []),
      { role: "user", content: args.prompt as string },
    ];
    const answer = json(
      accepted(
        await postJson(caller, "/v1/chat/completions", {
          model: args.model,
          messages,
          ...(args.max_tokens === undefined ? {} : { max_tokens: args.max_tokens }),
        }),
      ),
    );
    const choice = (answer.choices as { message?: { content?: unknown } }[] | undefined)?.[0];
    const text = typeof choice?.message?.content === "string" ? choice.message.content : "";
    return { content: [{ type: "text", text }] };
  },
};

const generateImage: GatewayTool = {
  name: "generate_image",
  title: "Generate an image",
  description:
    "Generate an image from a text prompt with one of the gateway's image models. Returns the image (PNG) and a link to the stored file on the gateway (fetching it needs the same key).",
  input: z.object({
    model: modelName,
    prompt: z.string().min(1).describe("What the image should show."),
    size: z
      .string()
      .regex(/^(\d+x\d+|auto)$/)
      .optional()
      .describe('WIDTHxHEIGHT in pixels, e.g. "1024x1024" (the default).'),
  }),
  async run(args, caller) {
    const answer = json(
      accepted(
        await postJson(caller, "/v1/images/generations", {
          model: args.model,
          prompt: args.prompt,
          n: 1,
          ...(args.size === undefined ? {} : { size: args.size }),
          response_format: "url",
        }),
      ),
    );
    const url = (answer.data as { url?: string }[] | undefined)?.[0]?.url;
    if (!url)
      return { content: [{ type: "text", text: "The model returned no image." }], isError: true };
    const path = pathOf(url);
    if (!path.startsWith("/v1/files/")) {
      // The provider's own URL (a DALL-E link), which the /v1 twin passed on and was charged
      // for: the image is there, not on the gateway, so it is given as the link it is.
      return {
        content: [{ type: "resource_link", uri: url, name: path.split("/").pop() || "image" }],
      };
    }
    // The image the request was charged for, which it stored: part of its answer, delivered
    // whatever happened to the account since.
    const id = path.slice("/v1/files/".length).split(/[/?]/)[0]!;
    const file = await caller.storedFile(id);
    if (!file) {
      return {
        content: [{ type: "text", text: "The image this call made is no longer stored." }],
        isError: true,
      };
    }
    const mimeType = file.contentType.split(";")[0]!.trim();
    const link = caller.link(path);
    return {
      content: [
        { type: "image", data: file.bytes.toString("base64"), mimeType },
        { type: "resource_link", uri: link, name: id, mimeType },
      ],
    };
  },
};

const generateSpeech: GatewayTool = {
  name: "generate_speech",
  title: "Generate speech",
  description:
    "Turn text into spoken audio with one of the gateway's speech models (a voice-over, a spoken summary). Returns the audio.",
  input: z.object({
    model: modelName,
    input: z.string().min(1).max(4096).describe("The text to speak."),
    voice: z.string().min(1).optional().describe('The voice, e.g. "alloy" (the default).'),
    format: z
      .string()
      .min(1)
      .optional()
      .describe('The audio format, e.g. "wav" or "mp3"; the model\'s default when left out.'),
  }),
  async run(args, caller) {
    const audio = accepted(
      await postJson(caller, "/v1/audio/speech", {
        model: args.model,
        input: args.input,
        voice: args.voice ?? "alloy",
        ...(args.format === undefined ? {} : { response_format: args.format }),
      }),
    );
    return {
      content: [
        {
          type: "audio",
          data: audio.body.toString("base64"),
          mimeType: mimeOf(audio, "application/octet-stream"),
        },
      ],
    };
  },
};

const transcribeAudio: GatewayTool = {
  name: "transcribe_audio",
  title: "Transcribe audio",
  description:
    "Turn speech in an audio file into text with one of the gateway's transcription models. Give the file's bytes as base64.",
  input: z.object({
    model: modelName,
    audio: z.base64().min(1).describe("The audio file (WAV, MP3, ...), base64-encoded."),
    filename: z
      .string()
      .min(1)
      .optional()
      .describe(
        'The file\'s name, whose extension tells its format, e.g. "talk.mp3" (default "audio.wav").',
      ),
    language: z.string().min(2).optional().describe('The spoken language as ISO-639-1, e.g. "en".'),
  }),
  async run(args, caller) {
    const form = new FormData();
    form.set("model", args.model as string);
    form.set("response_format", "json");
    if (args.language) form.set("language", args.language as string);
    form.set(
      "file",
      new Blob([Buffer.from(args.audio as string, "base64")]),
      (args.filename as string | undefined) ?? "audio.wav",
    );
    const encoded = new Response(form);
    const answer = json(
      accepted(
        await caller.send({
          method: "POST",
          path: "/v1/audio/transcriptions",
          body: new Uint8Array(await encoded.arrayBuffer()),
          contentType: encoded.headers.get("content-type") ?? "multipart/form-data",
        }),
      ),
    );
    return { content: [{ type: "text", text: String(answer.text ?? "") }] };
  },
};

const jobStatus = z.enum(["queued", "running", "completed", "failed"]);

/** What the job tools put in `structuredContent`: the job's id and status, and more once it ended. */
const jobOutput = z.looseObject({
  id: z.string(),
  status: jobStatus,
});

function submitted(job: Record<string, unknown>): ToolResult {
  const shown = { id: job.id, status: job.status };
  return {
    content: [
      {
        type: "text",
        text: `${JSON.stringify(shown)}\nPoll it with get_job until its status is completed or failed.`,
      },
    ],
    structuredContent: shown,
  };
}

const generateMusic: GatewayTool = {
  name: "generate_music",
  title: "Generate music",
  description:
    "Start generating a piece of music from a prompt with one of the gateway's music models. It runs as a job: this returns {id, status} at once; call get_job with the id until it is completed, then it carries the audio.",
  input: z.object({
    model: modelName,
    prompt: z.string().min(1).describe("What the music should sound like."),
    duration: z.number().positive().optional().describe("Length in seconds (default 10)."),
  }),
  output: jobOutput,
  async run(args, caller) {
    const job = json(
      accepted(
        await postJson(caller, "/v1/music/generations", {
          model: args.model,
          prompt: args.prompt,
          ...(args.duration === undefined ? {} : { duration: args.duration }),
        }),
      ),
    );
    return submitted(job);
  },
};

const generateVideo: GatewayTool = {
  name: "generate_video",
  title: "Generate a video",
  description:
    "Start generating a video clip from a prompt with one of the gateway's video models. It runs as a job: this returns {id, status} at once; call get_job with the id until it is completed, then it carries a link to the video.",
  input: z.object({
    model: modelName,
    prompt: z.string().min(1).describe("What the video should show."),
    seconds: z.number().positive().optional().describe("Length in seconds (default 4)."),
  }),
  output: jobOutput,
  async run(args, caller) {
    const job = json(
      accepted(
        await postJson(caller, "/v1/videos/generations", {
          model: args.model,
          prompt: args.prompt,
          ...(args.seconds === undefined ? {} : { seconds: args.seconds }),
        }),
      ),
    );
    return submitted(job);
  },
};

/** The poll paths a job id may be found at, by the kind its id names. */
function jobPaths(id: string): string[] {
  const at = encodeURIComponent(id);
  if (id.startsWith("music")) return [`/v1/music/generations/${at}`];
  return [`/v1/videos/generations/${at}`, `/v1/videos/extensions/${at}`];
}

/** A job's `result.url` as the caller reaches the gateway (its /v1 route handed out its own). */
function linkedJob(job: Record<string, unknown>, caller: ToolCaller): Record<string, unknown> {
  const result = job.result as { url?: string } | undefined;
  return result?.url
    ? { ...job, result: { ...result, url: caller.link(pathOf(result.url)) } }
    : job;
}

const getJob: GatewayTool = {
  name: "get_job",
  title: "Check a music or video job",
  description:
    "Read a music or video job started with generate_music or generate_video: its status (queued, running, completed, failed), and once completed its result (music as audio, video as a link).",
  input: z.object({
    id: z.string().min(1).describe("The job id that generate_music or generate_video returned."),
  }),
  output: jobOutput,
  async run(args, caller) {
    let answer: LoopbackAnswer | undefined;
    for (const path of jobPaths(args.id as string)) {
      answer = await caller.send({ method: "GET", path });
      if (answer.status !== 404) break;
    }
    const job = json(accepted(answer!));
    const result = job.result as { url?: string; content_type?: string } | undefined;
    const content: ToolContent[] = [];
    const shown = linkedJob(job, caller);
    if (job.status === "completed" && result?.url) {
      const path = pathOf(result.url);
      const link = caller.link(path);
      if (String(job.id).startsWith("music")) {
        const media = accepted(await caller.send({ method: "GET", path }));
        content.push({
          type: "audio",
          data: media.body.toString("base64"),
          mimeType: mimeOf(media, "audio/wav"),
        });
      }
      content.push({
        type: "resource_link",
        uri: link,
        name: String(job.id),
        ...(result.content_type ? { mimeType: result.content_type } : {}),
      });
    }
    content.unshift({ type: "text", text: JSON.stringify(shown, null, 2) });
    return { content, structuredContent: shown };
  },
};

/** The listing of each kind of job, as `kind` names it in list_jobs. */
const jobListings = {
  music: "/v1/music/generations",
  video: "/v1/videos/generations",
  video_extension: "/v1/videos/extensions",
} as const;

type ListedJob = Record<string, unknown> & { id: string; created_at?: number };

/** One page of a /v1 job listing. */
async function jobPage(
  caller: ToolCaller,
  path: string,
  query: { limit: number; after?: string },
): Promise<{ data: ListedJob[]; has_more: boolean }> {
  const params = new URLSearchParams({ limit: String(query.limit), order: "desc" });
  if (query.after !== undefined) params.set("after", query.after);
  const page = json(accepted(await caller.send({ method: "GET", path: `${path}?${params}` })));
  return { data: (page.data ?? []) as ListedJob[], has_more: page.has_more === true };
}

function jobLine(job: ListedJob): string {
  const created =
    typeof job.created_at === "number" ? new Date(job.created_at * 1000).toISOString() : "";
  return [job.id, job.object, job.status, job.model, created].filter(Boolean).join(" - ");
}

const listJobs: GatewayTool = {
  name: "list_jobs",
  title: "List music and video jobs",
  description:
    "List the account's music and video jobs, newest first, with their status (queued, running, completed, failed): to find a job whose id was lost (after a reconnect, say), then read it with get_job. Give `kind` to list one kind, a page at a time.",
  input: z
    .object({
      kind: z
        .enum(["music", "video", "video_extension"])
        .optional()
        .describe("Only jobs of this kind; every kind when left out."),
      limit: z
        .number()
        .int()
        .min(1)
        .max(100)
        .optional()
        .describe("At most this many jobs (default 20)."),
      after: z
        .string()
        .min(1)
        .optional()
        .describe(
          "The next page: the jobs after this id, the last one of the page before. Goes with `kind`.",
        ),
    })
    .refine((args) => args.after === undefined || args.kind !== undefined, {
      message: "after pages one kind's listing; give kind too",
      path: ["after"],
    }),
  output: z.looseObject({ jobs: z.array(jobOutput), has_more: z.boolean() }),
  async run(args, caller) {
    const limit = (args.limit as number | undefined) ?? 20;
    const kind = args.kind as keyof typeof jobListings | undefined;
    const paths = kind ? [jobListings[kind]] : Object.values(jobListings);
    const pages = [];
    // One listing after the other: each is a /v1 request of the caller's, limited as one.
    for (const path of paths)
      pages.push(await jobPage(caller, path, { limit, after: args.after as string | undefined }));
    // Newest first across the kinds; within one listing, the order it gave.
    const all = pages
      .flatMap((page) => page.data)
      .sort((a, b) => (b.created_at ?? 0) - (a.created_at ?? 0));
    const jobs = all.slice(0, limit).map((job) => linkedJob(job, caller));
    const hasMore = all.length > limit || pages.some((page) => page.has_more);
    const more = hasMore
      ? kind
        ? `\nMore: call list_jobs again with kind "${kind}" and after "${jobs[jobs.length - 1]?.id}".`
        : "\nMore: give kind (and then after) to page through one kind."
      : "";
    const text = jobs.length
      ? `${jobs.map((job) => jobLine(job as ListedJob)).join("\n")}${more}`
      : "No jobs.";
    return {
      content: [{ type: "text", text }],
      structuredContent: { jobs, has_more: hasMore },
    };
  },
};

/** Every tool, by the names agents' configs and prompts use (an interface: never rename one). */
export const gatewayTools: readonly GatewayTool[] = [
  listModels,
  getQuota,
  chat,
  generateImage,
  generateSpeech,
  transcribeAudio,
  generateMusic,
  generateVideo,
  getJob,
  listJobs,
];

/**
 * Runs a tool; a refusal of its /v1 route is its `isError` result. The result names the /v1
 * request it reports (`requestIdMeta`): the first the route accepted (get_job's poll that found
 * the job, not the download after it), else the last, the one refused.
 */
export async function runTool(
  tool: GatewayTool,
  args: Record<string, unknown>,
  caller: ToolCaller,
): Promise<ToolResult> {
  let acceptedId: string | undefined;
  let lastId: string | undefined;
  const noting: ToolCaller = {
    ...caller,
    send: async (request) => {
      const answer = await caller.send(request);
      lastId = requestIdOf(answer) ?? lastId;
      if (answer.status < 400) acceptedId ??= requestIdOf(answer);
      return answer;
    },
  };
  let result: ToolResult;
  try {
    result = await tool.run(args, noting);
  } catch (err) {
    if (!(err instanceof Refused)) throw err;
    result = err.result;
  }
  const servedAs = acceptedId ?? lastId;
  return servedAs ? { ...result, _meta: { [requestIdMeta]: servedAs } } : result;
}
