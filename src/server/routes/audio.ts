import type { Context } from "hono";
import { z } from "zod";
import type { Services } from "../compose/services.js";
import {
  forMediaWire,
  forModality,
  onlyMock,
  resolveTarget,
  type Target,
} from "../dispatch/resolve.js";
import { badRequest, GatewayError } from "../errors.js";
import { formFields, readForm, readJson } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import {
  type FormFields,
  openaiSpeech,
  openaiTranscription,
  type UploadedFile,
  type UpstreamTranscript,
} from "../providers/media-openai.js";
import {
  isMockSpeechFormat,
  readWavInfo,
  speechContentType,
} from "../providers/mock/media/index.js";
import {
  type MockTranscript,
  mockMediaPreamble,
  mockSpeechAudio,
  mockTranscribe,
  unsupportedSpeechFormat,
} from "../providers/mock/media-mock.js";
import type { Attempt } from "../providers/types.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";
import { perUnit, serveAdmitted } from "./admitted.js";

// ---- speech ---------------------------------------------------------------

/** OpenAI's speech body; `response_format` stays free text so openai wires get any format. */
export const speechBody = z.looseObject({
  model: z.string().min(1),
  input: z.string().min(1).max(4096),
  voice: z.union([z.string().min(1), z.looseObject({ id: z.string().min(1) })]),
  response_format: z.string().min(1).optional(),
  speed: z.number().min(0.25).max(4).optional(),
  instructions: z.string().optional(),
});
type SpeechBody = z.infer<typeof speechBody>;

/** POST /v1/audio/speech: the audio bytes, priced per character of input. */
export function speechHandler(services: Services): Handler {
  return async (c) => {
    const body = await readJson(c, speechBody);
    const target = mediaTarget(services, body.model, "speech");
    const format = body.response_format;
    // Refuse before holding money when no candidate could produce the format.
    if (format !== undefined && !isMockSpeechFormat(format) && onlyMock(services, target)) {
      throw unsupportedSpeechFormat(format);
    }
    const characters = [...body.input].length;
    const signal = clientGone(c);
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "audio.speech", worstCase: perUnit(characters), signal },
      (attempt) => speak(services, attempt, body, signal),
      () => ({ units: characters }),
    );
    return c.body(new Uint8Array(result.bytes), 200, {
      "content-type": speechContentType(result.format),
      "content-length": String(result.bytes.length),
    });
  };
}

async function speak(
  services: Pick<Services, "http">,
  attempt: Attempt,
  body: SpeechBody,
  signal: GoneSignal,
): Promise<{ bytes: Buffer; format: string }> {
  if (attempt.provider.wire === "openai") {
    // OpenAI's own default format is mp3.
    return {
      bytes: await openaiSpeech(services.http, attempt, body, signal),
      format: body.response_format ?? "mp3",
    };
  }
  await mockMediaPreamble(attempt.provider, body.input, signal);
  return asRouteStep(() => mockSpeechAudio(body.input, body.response_format));
}

// ---- transcriptions -------------------------------------------------------

/** OpenAI's upload limit for transcriptions. */
const maxTranscriptionBytes = 25 * 1024 * 1024;

const transcriptionFormats = ["json", "text", "verbose_json", "srt", "vtt"] as const;
type TranscriptionFormat = (typeof transcriptionFormats)[number];

/**
 * Without a duration from the provider, the hold assumes a low-bitrate speech codec (16 kbit/s)
 * so it covers any real file, and the charge assumes a common one (128 kbit/s).
 */
const worstCaseBytesPerSecond = 2_000;
const typicalBytesPerSecond = 16_000;

const granularityValues = ["word", "segment"] as const;
type Granularity = (typeof granularityValues)[number];

interface TranscriptionRequest {
  file: UploadedFile;
  model: string;
  format: TranscriptionFormat;
  language: string | undefined;
  /** `timestamp_granularities[]`: the timings verbose_json lists (segments when none is given). */
  granularities: Granularity[];
  /** Every text field of the form, forwarded as-is to openai wires. */
  fields: FormFields;
}

/** POST /v1/audio/transcriptions: multipart `file` + `model`, priced per second of audio. */
export function transcriptionHandler(services: Services): Handler {
  return async (c) => {
    const req = await readTranscriptionForm(c);
    const target = mediaTarget(services, req.model, "transcription");
    const wav = readWavInfo(req.file.bytes);
    // The mock's answer is known now; a file it cannot read is a 400 before any money is held.
    const mockAnswer = onlyMock(services, target) ? mockTranscribe(req.file.bytes) : undefined;
    const holdSeconds = Math.max(
      1,
      Math.ceil(wav ? wav.durationSeconds : req.file.bytes.length / worstCaseBytesPerSecond),
    );
    const signal = clientGone(c);
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "audio.transcriptions", worstCase: perUnit(holdSeconds), signal },
      (attempt) => transcribe(services, attempt, req, mockAnswer, signal),
      (result) => {
        const seconds =
          result.seconds ?? wav?.durationSeconds ?? req.file.bytes.length / typicalBytesPerSecond;
        return { units: Math.max(1, Math.ceil(seconds)) };
      },
    );
    if (result.answer.kind === "text") {
      return c.body(result.answer.text, 200, { "content-type": textType(req.format) });
    }
    return c.json(result.answer.body);
  };
}

async function readTranscriptionForm(c: Context<AppEnv>): Promise<TranscriptionRequest> {
  const form = await readForm(c, "the audio in a field named file");
  const file = form.get("file");
  if (file === null || typeof file === "string") {
    throw badRequest(
      "Invalid request: file: required; send the audio as a multipart file field named file.",
    );
  }
  if (file.size > maxTranscriptionBytes) {
    throw new GatewayError(
      413,
      "bad_request",
      "Invalid request: file: larger than the limit of 25 MB.",
    );
  }
  if (file.size === 0) throw badRequest("Invalid request: file: the uploaded file is empty.");

  const fields = formFields(form);
  if (!fields.model) throw badRequest("Invalid request: model: required.");
  const format = fields.response_format ?? "json";
  if (!(transcriptionFormats as readonly string[]).includes(format)) {
    throw badRequest(
      `Invalid request: response_format: must be one of ${transcriptionFormats.join(", ")}.`,
    );
  }
  const granularities = timestampGranularities(form, format);
  return {
    file: {
      bytes: new Uint8Array(await file.arrayBuffer()),
      filename: file.name || "audio",
      contentType: file.type || "application/octet-stream",
    },
    model: fields.model,
    format: format as TranscriptionFormat,
    language: fields.language || undefined,
    granularities,
    // Each value is its own part again upstream: the form's last value alone would lose the rest.
    fields:
      granularities.length > 0 ? { ...fields, "timestamp_granularities[]": granularities } : fields,
  };
}

/**
 * `timestamp_granularities[]` (the openai SDKs' name for each value), as OpenAI takes it: word
 * and segment, with verbose_json only, since no other format has a place for the timings.
 */
function timestampGranularities(form: FormData, format: string): Granularity[] {
  const values = [
    ...form.getAll("timestamp_granularities[]"),
    ...form.getAll("timestamp_granularities"),
  ];
  const out: Granularity[] = [];
  for (const value of values) {
    if (typeof value !== "string" || !(granularityValues as readonly string[]).includes(value)) {
      throw badRequest(
        `Invalid request: timestamp_granularities[]: each must be one of ${granularityValues.join(", ")}.`,
      );
    }
    if (!out.includes(value as Granularity)) out.push(value as Granularity);
  }
  if (out.length > 0 && format !== "verbose_json") {
    throw badRequest(
      "Invalid request: timestamp_granularities[]: timings are given with response_format verbose_json only.",
    );
  }
  return out;
}

async function transcribe(
  services: Pick<Services, "http">,
  attempt: Attempt,
  req: TranscriptionRequest,
  mockAnswer: MockTranscript | undefined,
  signal: GoneSignal,
): Promise<{ answer: UpstreamTranscript; seconds: number | undefined }> {
  if (attempt.provider.wire === "openai") {
    const answer = await openaiTranscription(services.http, attempt, req.fields, req.file, signal);
    return { answer, seconds: answer.kind === "json" ? answer.seconds : undefined };
  }
  const prompt = req.fields.prompt;
  await mockMediaPreamble(attempt.provider, typeof prompt === "string" ? prompt : "", signal);
  const heard = mockAnswer ?? asRouteStep(() => mockTranscribe(req.file.bytes));
  return { answer: renderTranscript(heard, req), seconds: heard.durationSeconds };
}

interface Segment {
  id: number;
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
  temperature: number;
  avg_logprob: number;
  compression_ratio: number;
  no_speech_prob: number;
}

/**
 * The mock's transcript in each of OpenAI's formats; segments are sentences, timed by length, and
 * words are timed by length within their sentence.
 */
function renderTranscript(
  heard: MockTranscript,
  req: { format: TranscriptionFormat; language?: string; granularities?: Granularity[] },
): UpstreamTranscript {
  const { text, durationSeconds } = heard;
  const seconds = round2(durationSeconds);
  if (req.format === "json") {
    return {
      kind: "json",
      body: { text, usage: { type: "duration", seconds: Math.ceil(seconds) } },
      seconds,
    };
  }
  if (req.format === "text") return { kind: "text", text };
  const segments = sentenceSegments(text, seconds);
  if (req.format === "verbose_json") {
    const granularities = req.granularities ?? [];
    return {
      kind: "json",
      body: {
        task: "transcribe",
        language: req.language ?? "english",
        duration: seconds,
        text,
        ...(granularities.includes("word") ? { words: segments.flatMap(segmentWords) } : {}),
        ...(granularities.length === 0 || granularities.includes("segment") ? { segments } : {}),
        usage: { type: "duration", seconds: Math.ceil(seconds) },
      },
      seconds,
    };
  }
  if (req.format === "srt") {
    const blocks = segments.map(
      (seg, i) =>
        `${i + 1}\n${timestamp(seg.start, ",")} --> ${timestamp(seg.end, ",")}\n${seg.text.trim()}\n`,
    );
    return { kind: "text", text: blocks.join("\n") };
  }
  const cues = segments.map(
    (seg) => `${timestamp(seg.start, ".")} --> ${timestamp(seg.end, ".")}\n${seg.text.trim()}\n`,
  );
  return { kind: "text", text: `WEBVTT\n\n${cues.join("\n")}` };
}

function sentenceSegments(text: string, seconds: number): Segment[] {
  const sentences = text.split(/(?<=[.!?])\s+/).filter((part) => part.trim() !== "");
  const total = sentences.reduce((sum, part) => sum + part.length, 0) || 1;
  let start = 0;
  return (sentences.length ? sentences : [text]).map((part, id) => {
    const end =
      id === sentences.length - 1 ? seconds : round2(start + (seconds * part.length) / total);
    const segment: Segment = {
      id,
      seek: 0,
      start,
      end,
      text: ` ${part.trim()}`,
      tokens: [],
      temperature: 0,
      avg_logprob: 0,
      compression_ratio: 1,
      no_speech_prob: 0,
    };
    start = end;
    return segment;
  });
}

/** A segment's words, its time shared among them by length, as OpenAI lists them (no punctuation). */
function segmentWords(segment: Segment): { word: string; start: number; end: number }[] {
  const words = segment.text
    .split(/\s+/)
    .map((word) => word.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, ""))
    .filter((word) => word !== "");
  const total = words.reduce((sum, word) => sum + word.length, 0) || 1;
  const span = segment.end - segment.start;
  let start = segment.start;
  let done = 0;
  return words.map((word, i) => {
    done += word.length;
    const end =
      i === words.length - 1 ? segment.end : round2(segment.start + (span * done) / total);
    const timed = { word, start, end };
    start = end;
    return timed;
  });
}

function timestamp(seconds: number, separator: "," | "."): string {
  const ms = Math.round(seconds * 1000);
  const pad = (value: number, width = 2) => String(value).padStart(width, "0");
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  return `${pad(h)}:${pad(m)}:${pad(s)}${separator}${pad(ms % 1000, 3)}`;
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}

function textType(format: TranscriptionFormat): string {
  if (format === "vtt") return "text/vtt; charset=utf-8";
  return "text/plain; charset=utf-8";
}

// ---- shared ---------------------------------------------------------------

/**
 * Inside a route mixing the mock with other providers, the mock refusing a format or a file
 * moves the request on to the next step. (With only mock candidates the clear 400 was already
 * answered before dispatch.)
 */
function asRouteStep<T>(mockCall: () => T): T {
  try {
    return mockCall();
  } catch (err) {
    if (err instanceof GatewayError && err.status === 400) {
      throw new UpstreamFailure("rejected", 400, "invalid_request_error");
    }
    throw err;
  }
}

function mediaTarget(
  services: Services,
  model: string,
  modality: "speech" | "transcription",
): Target {
  const target = forModality(resolveTarget(services.store.getCatalog(), model), modality);
  return forMediaWire(services, target, modality);
}
