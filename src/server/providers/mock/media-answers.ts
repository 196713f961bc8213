import { providerOptions } from "../../../store/provider-options.js";
import type { ProviderRow } from "../../../store/types.js";
import { badRequest, type GatewayError } from "../../errors.js";
import { MAX_IMAGE_SIDE, readPngSize, withinMaxSide } from "../../media/png.js";
import { decodeWav } from "../../media/wav.js";
import type { GoneSignal } from "../../time/gone-signal.js";
import { sleep } from "../../time/sleep.js";
import { failureOf } from "../classify.js";
import type { ImageEditRequest, UploadedFile } from "../provider.js";
import {
  hearMockSpeech,
  isMockSpeechFormat,
  mockHeardText,
  mockImage,
  mockSpeech,
  supportedMockSpeechFormats,
} from "./media/index.js";
import { SeededRandom } from "./media/seed.js";

/**
 * The built-in `mock` provider for every media modality: real PNG, WAV and AVI bytes from the
 * media module, with the provider's `mock` options (latency, forced failures, job duration).
 */
export interface MockMediaOptions {
  latency_ms?: number;
  fail_status?: number;
  /** How long an asynchronous music or video job runs before its media is ready. */
  job_seconds?: number;
}

/** Two seconds feels like a job in a demo; tests set a few hundredths. */
const defaultJobSeconds = 2;

export function mockMediaOptions(provider: ProviderRow): MockMediaOptions {
  try {
    return (providerOptions(provider).mock as MockMediaOptions | undefined) ?? {};
  } catch {
    return {};
  }
}

export function mockJobMs(provider: ProviderRow): number {
  return Math.round((mockMediaOptions(provider).job_seconds ?? defaultJobSeconds) * 1000);
}

/**
 * The provider's configured latency, then its forced failure if any. A `[[mock:fail=503]]` in the
 * prompt forces one too, as it does for chat, so users can test their failure paths.
 */
export async function mockMediaPreamble(
  provider: ProviderRow,
  prompt: string,
  signal: GoneSignal,
): Promise<void> {
  const options = mockMediaOptions(provider);
  await sleep(options.latency_ms ?? 0, signal);
  const directive = /\[\[mock:fail=(\d{3})\]\]/.exec(prompt);
  const status = directive ? Number(directive[1]) : options.fail_status;
  if (status) throw failureOf(status, undefined, "", "invalid_request_error");
}

/**
 * The 400 for an edit whose image or mask is a PNG past the sides the mock draws: decoding it
 * would take memory the upload's size does not bound. Undefined when the mock can read them.
 */
export function unreadableEditUpload(
  req: Pick<ImageEditRequest, "images" | "mask">,
): GatewayError | undefined {
  const uploads: [string, UploadedFile][] = req.images.map((file) => ["image", file]);
  if (req.mask) uploads.push(["mask", req.mask]);
  for (const [field, file] of uploads) {
    const size = readPngSize(file.bytes);
    if (size && !withinMaxSide(size)) {
      return badRequest(
        `Invalid request: ${field}: the PNG is ${size.width}x${size.height} pixels; the mock provider reads pictures with sides up to ${MAX_IMAGE_SIDE} pixels.`,
      );
    }
  }
  return undefined;
}

/** `n` distinct pictures: the first is the prompt's own picture, the rest vary by index. */
export function mockImages(prompt: string, size: string, n: number): Buffer[] {
  return Array.from({ length: n }, (_, i) =>
    mockImage(i === 0 ? prompt : `${prompt}\n#${i + 1}`, size),
  );
}

/** WAV by default: the mock cannot encode mp3 (OpenAI's default), and says so when asked for it. */
export function mockSpeechAudio(
  input: string,
  format: string | undefined,
): { bytes: Buffer; format: string } {
  const chosen = format ?? "wav";
  if (!isMockSpeechFormat(chosen)) throw unsupportedSpeechFormat(chosen);
  return { bytes: mockSpeech(input, { format: chosen }), format: chosen };
}

export function unsupportedSpeechFormat(format: string) {
  return badRequest(
    `Invalid request: response_format: the mock provider cannot produce "${format}"; ` +
      `use one of ${supportedMockSpeechFormats.join(", ")}.`,
  );
}

export interface MockTranscript {
  text: string;
  durationSeconds: number;
}

/**
 * What the mock heard in each upload, for as long as the upload lives: the refusal check before
 * admission and the transcription after it read the same bytes, and decoding them is the cost.
 */
const heardUploads = new WeakMap<Uint8Array, MockTranscript | GatewayError>();

/**
 * The mock transcribes any WAV it can decode: its own speech word for word, any other recording
 * as deterministic words drawn from its samples. Audio it cannot decode is a clear 400, returned.
 */
export function hearUpload(audio: Uint8Array): MockTranscript | GatewayError {
  let heard = heardUploads.get(audio);
  if (heard === undefined) {
    heard = hear(audio);
    heardUploads.set(audio, heard);
  }
  return heard;
}

function hear(audio: Uint8Array): MockTranscript | GatewayError {
  const wav = decodeWav(audio);
  if (!wav) {
    return badRequest(
      "Invalid request: file: the audio could not be decoded; the mock provider reads WAV files " +
        "(PCM 8, 16, 24 or 32-bit, or 32-bit float).",
    );
  }
  // One sample a frame (channels are mixed down), so this is the header's frames / rate.
  const durationSeconds = wav.samples.length / wav.sampleRate;
  const text = hearMockSpeech(wav) ?? mockHeardText(wav.data, durationSeconds);
  return { text, durationSeconds };
}

/** OpenAI's text-embedding-3-small length: what the mock answers without `dimensions`. */
export const mockEmbeddingDimensions = 1536;

/**
 * A unit-length vector seeded by the input: the same text gives the same vector everywhere,
 * different texts almost orthogonal ones.
 */
export function mockEmbedding(input: string, dimensions: number): Float32Array {
  const random = new SeededRandom("embedding", input);
  const vector = new Float32Array(dimensions);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    vector[i] = random.range(-1, 1);
    norm += vector[i] * vector[i];
  }
  const scale = 1 / Math.sqrt(norm);
  for (let i = 0; i < dimensions; i++) vector[i] *= scale;
  return vector;
}
