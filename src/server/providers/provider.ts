import type { ProviderRow } from "../../store/types.js";
import type { GoneSignal } from "../time/gone-signal.js";
import type {
  Backend,
  ClientStyle,
  CompletionRequest,
  CompletionResult,
} from "../wire/completion-types.js";
import type { TextOnlyField } from "../wire/translate/text-completion.js";
import type { UpstreamFailure } from "../wire/upstream-failure.js";
import type { UpstreamHttp } from "./http-upstream.js";
import type { MockScript } from "./mock-script.js";

/** One way to reach a model: a provider, and the credential to use with it. */
export interface Attempt extends Backend {
  credential: Credential;
}

export interface Credential {
  source: "pool" | "byok" | "none";
  secret: string | undefined;
  /** Called when the attempt ends, with how the upstream answered, so the pool can cool or free the key. */
  release(outcome: "ok" | "rate_limited" | "failed", retryAfterMs?: number): void;
}

/** A file a client uploaded (transcriptions, image edits), forwarded or read as-is. */
export interface UploadedFile {
  bytes: Uint8Array;
  filename: string;
  contentType: string;
}

/** A form's text fields; a field given several times (`timestamp_granularities[]`) is a list. */
export type FormFields = Record<string, string | string[]>;

/** Anthropic's `/v1/messages/count_tokens` body, as the client sent it (model still the client's). */
export interface CountTokensRequest {
  body: Record<string, unknown> & { messages: unknown[] };
  /** The client's `anthropic-beta` header. */
  anthropicBeta: string | undefined;
  signal: GoneSignal;
}

/** A Responses `input_tokens` body for the provider (model still the client's). */
export interface CountResponsesTokensRequest {
  body: Record<string, unknown>;
  signal: GoneSignal;
}

/** An embeddings request in OpenAI's shape, validated by the route. */
export interface EmbedRequest {
  body: Record<string, unknown> & {
    input: string | string[] | number[] | number[][];
    dimensions?: number;
    encoding_format?: "float" | "base64";
  };
  /** Each input as the text it stands for, with the gateway's estimate of its tokens. */
  inputs: { text: string; tokens: number }[];
  signal: GoneSignal;
}

/**
 * OpenAI's embeddings list (`object: "list"`, `data[].embedding` as the client asked: floats or
 * base64), and the input tokens the provider reported, if it did.
 */
export interface Embeddings {
  body: Record<string, unknown>;
  reportedTokens?: number;
}

/** `encoding_format: "base64"`: the float32 values, little-endian, in base64. */
export function embeddingBase64(vector: Float32Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i], i * 4);
  return bytes.toString("base64");
}

export interface ImageDatum {
  b64_json?: string;
  url?: string;
  revised_prompt?: string;
}

/** Pictures in OpenAI's images shape, before the route stores base64 ones as files. */
export interface UpstreamImages {
  created?: number;
  data: ImageDatum[];
  usage?: unknown;
}

export interface ImageRequest {
  /** The client's body in OpenAI's shape (`model` still the client's). */
  body: Record<string, unknown> & { prompt: string };
  size: string;
  n: number;
  signal: GoneSignal;
}

export interface ImageEditRequest {
  /** The form's text fields, forwarded as-is by OpenAI-compatible providers. */
  fields: Record<string, string>;
  prompt: string;
  size: string | undefined;
  images: UploadedFile[];
  mask: UploadedFile | undefined;
  n: number;
  signal: GoneSignal;
}

export interface SpeechRequest {
  body: Record<string, unknown> & { input: string; response_format?: string };
  signal: GoneSignal;
}

export interface SpeechAudio {
  bytes: Buffer;
  /** The audio's format (mp3, wav, ...): what the client asked, else the provider's default. */
  format: string;
}

export type TranscriptionFormat = "json" | "text" | "verbose_json" | "srt" | "vtt";

export interface TranscribeRequest {
  file: UploadedFile;
  format: TranscriptionFormat;
  language: string | undefined;
  /** `timestamp_granularities[]`: the timings verbose_json lists (segments when none is given). */
  granularities: ("word" | "segment")[];
  /** Every text field of the form, forwarded as-is by OpenAI-compatible providers. */
  fields: FormFields;
  signal: GoneSignal;
}

/** What a transcription provider answered: JSON for json/verbose_json, text for the rest. */
export type UpstreamTranscript =
  | { kind: "json"; body: Record<string, unknown>; seconds: number | undefined }
  | { kind: "text"; text: string; seconds?: number };

/** A job's finished media. */
export interface ProducedMedia {
  bytes: Buffer;
  contentType: string;
  /** Length of the finished media in seconds, as its own header says. */
  duration: number;
}

/** A music or video job's request; `wait` spends the provider's time on the gateway's clock. */
export interface MediaJobRequest {
  kind: "music" | "video" | "video_extension";
  prompt: string;
  seconds: number;
  /**
   * A video's frame size (`WIDTHxHEIGHT`), as the job shows it: the size `videoSize` gave at
   * submission, or what the client asked of a provider without one. An extension continues its
   * source's frames.
   */
  size: string | undefined;
  /** The video an extension continues. */
  source: Uint8Array | undefined;
  /**
   * Spends `ms` of the provider's time from the attempt's start, reporting the share of it gone
   * by as the job's progress.
   */
  wait(ms: number): Promise<void>;
  /**
   * Reports the share of the work done (0 to 99; the job shows 100 once completed): for a wire
   * whose API says how far its job has come. It only ever raises what the job shows.
   */
  progress(percent: number): Promise<void>;
  signal: GoneSignal;
}

/** What a provider call may use besides its attempt: the gateway's upstream HTTP and mock script. */
export interface ProviderContext {
  http: UpstreamHttp;
  mockScript: MockScript;
  /** The gateway's clock (`now`), which the mock's answers are dated by. */
  options: { now: () => number };
}

/**
 * What every provider wire implements, one folder each (`providers/<wire>/`), registered in
 * `providers/registry.ts`. A modality whose method a provider lacks is the spec's
 * `no_wire_for_modality`, decided in one place (`dispatch/resolve.ts`): routes never ask which
 * wire a provider speaks.
 */
export interface Provider {
  /** The provider needs a `base_url` in the config (the built-in mock does not). */
  readonly needsBaseUrl: boolean;
  /** Answers from inside the gateway, with no network and no credential (the mock). */
  readonly builtIn?: boolean;
  /**
   * The client styles this provider's API speaks itself: a request in one of them is sent with
   * only `model` mapped, where any other is translated (and, via a route, rewritten).
   */
  servesNatively(style: ClientStyle, provider: ProviderRow): boolean;
  /**
   * The legacy Completions API (POST /v1/completions) beyond chat's fields: `"native"` where this
   * provider's API serves it itself (`complete` sends the client's `textCompletion` body as
   * written and answers in that API's own shape), else the Completions fields its chat answers
   * carry all the same (the mock fills in the middle and echoes); none when absent. A request
   * that asks for a field no model of its target carries is refused before money is held.
   */
  textCompletions?(provider: ProviderRow): "native" | readonly TextOnlyField[];
  /** Its API may serve the Completions API itself: a provider of this wire may set `completions_native`. */
  readonly completionsApi?: boolean;
  /**
   * Its chat API takes `custom` (free-form) tools, their calls and a choice forcing one, as
   * OpenAI's does: a Responses client's custom tools reach it as chat's, where any other wire
   * leaves them out.
   */
  readonly takesCustomTools?: boolean;
  /**
   * Requests this provider would refuse whatever happens (a speech format it cannot produce,
   * audio or a picture it cannot read), as the 400 to answer. Checked before money is held, and
   * answered when every candidate of the request would refuse it.
   */
  readonly refuses?: {
    speech?(req: Omit<SpeechRequest, "signal">): Error | undefined;
    transcription?(file: UploadedFile): Error | undefined;
    edit?(req: Pick<ImageEditRequest, "images" | "mask">): Error | undefined;
  };
  /**
   * The frame size (`WIDTHxHEIGHT`) this provider makes a video in when asked for `asked` (or for
   * nothing): decided at submission, so a video job shows from its first answer on the size its
   * media will have. Absent, a video is made in the size asked.
   */
  videoSize?(asked: string | undefined): string;
  /**
   * A rejection (a 4xx) that this API words its own way, read again from the codes of its error
   * body (`failure.codes`): Google refuses a key with a 400, which is the key's failure, not the
   * client's. Undefined keeps the gateway's reading.
   */
  classify?(failure: UpstreamFailure): UpstreamFailure | undefined;
  /** Chat, messages and responses requests, streamed or not, answered in the client's style. */
  complete(
    ctx: ProviderContext,
    attempt: Attempt,
    req: CompletionRequest,
  ): Promise<CompletionResult>;
  /** The provider's own count of input tokens; absent, the gateway estimates. */
  countTokens?(ctx: ProviderContext, attempt: Attempt, req: CountTokensRequest): Promise<number>;
  /**
   * The count of a Responses body by a provider that speaks the Responses API (its
   * `/responses/input_tokens`), used where `servesNatively(responses)`.
   */
  countResponsesTokens?(
    ctx: ProviderContext,
    attempt: Attempt,
    req: CountResponsesTokensRequest,
  ): Promise<number>;
  embed?(ctx: ProviderContext, attempt: Attempt, req: EmbedRequest): Promise<Embeddings>;
  image?(ctx: ProviderContext, attempt: Attempt, req: ImageRequest): Promise<UpstreamImages>;
  imageEdit?(
    ctx: ProviderContext,
    attempt: Attempt,
    req: ImageEditRequest,
  ): Promise<UpstreamImages>;
  speech?(ctx: ProviderContext, attempt: Attempt, req: SpeechRequest): Promise<SpeechAudio>;
  transcribe?(
    ctx: ProviderContext,
    attempt: Attempt,
    req: TranscribeRequest,
  ): Promise<UpstreamTranscript>;
  music?(ctx: ProviderContext, attempt: Attempt, req: MediaJobRequest): Promise<ProducedMedia>;
  video?(ctx: ProviderContext, attempt: Attempt, req: MediaJobRequest): Promise<ProducedMedia>;
}
