import type { Context } from "hono";
import { z } from "zod";
import type { Services } from "../compose/services.js";
import {
  forMediaWire,
  forModality,
  resolveTarget,
  sureRefusal,
  type Target,
} from "../dispatch/resolve.js";
import { badRequest, GatewayError } from "../errors.js";
import { formFields, readForm, readJson } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import { speechContentType } from "../media/audio-formats.js";
import { readWavInfo } from "../media/wav.js";
import type { TranscribeRequest, TranscriptionFormat } from "../providers/provider.js";
import { provide } from "../providers/registry.js";
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

/** POST /v1/audio/speech: the audio bytes, priced per character of input. */
export function speechHandler(services: Services): Handler {
  return async (c) => {
    const body = await readJson(c, speechBody);
    const target = mediaTarget(services, body.model, "speech");
    // Refuse before holding money when no candidate could produce the format.
    const refusal = sureRefusal(services, target, (p) => p.refuses?.speech?.({ body }));
    if (refusal) throw refusal;
    const characters = [...body.input].length;
    const signal = clientGone(c);
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "audio.speech", worstCase: perUnit(characters), signal },
      async (attempt) => {
        const audio = await provide(attempt.provider, "speech")(services, attempt, {
          body,
          signal,
        });
        // No audio is nothing delivered: a provider failure, free, and a route's next step may speak.
        if (audio.bytes.length === 0) throw new UpstreamFailure("unavailable", 502);
        return audio;
      },
      () => ({ units: characters }),
    );
    return c.body(new Uint8Array(result.bytes), 200, {
      "content-type": speechContentType(result.format),
      "content-length": String(result.bytes.length),
    });
  };
}

// ---- transcriptions -------------------------------------------------------

/** OpenAI's upload limit for transcriptions. */
const maxTranscriptionBytes = 25 * 1024 * 1024;

const transcriptionFormats = [
  "json",
  "text",
  "verbose_json",
  "srt",
  "vtt",
] as const satisfies TranscriptionFormat[];

/**
 * Without a duration from the provider, the hold assumes the lowest bitrate of the speech codecs
 * the providers take (Opus at 6 kbit/s: a voice note in ogg or webm) so it covers any real file,
 * and the charge assumes a common one (128 kbit/s).
 */
const worstCaseBytesPerSecond = 750;
const typicalBytesPerSecond = 16_000;

const granularityValues = ["word", "segment"] as const;
type Granularity = (typeof granularityValues)[number];

type TranscriptionRequest = Omit<TranscribeRequest, "signal"> & { model: string };

/** POST /v1/audio/transcriptions: multipart `file` + `model`, priced per second of audio. */
export function transcriptionHandler(services: Services): Handler {
  return async (c) => {
    const req = await readTranscriptionForm(c);
    const target = mediaTarget(services, req.model, "transcription");
    const wav = readWavInfo(req.file.bytes);
    // A file no candidate can read is a 400 before any money is held.
    const refusal = sureRefusal(services, target, (p) => p.refuses?.transcription?.(req.file));
    if (refusal) throw refusal;
    const holdSeconds = Math.max(
      1,
      Math.ceil(wav ? wav.durationSeconds : req.file.bytes.length / worstCaseBytesPerSecond),
    );
    const signal = clientGone(c);
    const result = await serveAdmitted(
      services,
      c,
      { target, endpoint: "audio.transcriptions", worstCase: perUnit(holdSeconds), signal },
      async (attempt) => {
        const answer = await provide(attempt.provider, "transcription")(services, attempt, {
          ...req,
          signal,
        });
        return { answer, seconds: answer.seconds };
      },
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

function textType(format: TranscriptionFormat): string {
  if (format === "vtt") return "text/vtt; charset=utf-8";
  return "text/plain; charset=utf-8";
}

// ---- shared ---------------------------------------------------------------

function mediaTarget(
  services: Services,
  model: string,
  modality: "speech" | "transcription",
): Target {
  const target = forModality(resolveTarget(services.store.getCatalog(), model), modality);
  return forMediaWire(services, target, modality);
}
