import { createHash } from "node:crypto";
import { crc32 } from "node:zlib";
import { asBuffer } from "../../../media/bytes.js";
import { type DecodedWav, decodeWav, encodeWav, int16ToLe, leToInt16 } from "../../../media/wav.js";
import {
  isModemSampleRate,
  isSilentWindow,
  MAX_MODEM_SAMPLE_RATE,
  MIN_MODEM_SAMPLE_RATE,
  readByteSymbol,
  SYMBOLS_PER_SECOND,
  symbolLength,
  writeByteSymbol,
} from "./fsk.js";
import { SeededRandom } from "./seed.js";

/**
 * Mock text-to-speech whose audio carries its own transcript (see fsk.ts), laid out with the
 * rhythm of speech: one short burst per word, pauses between, about 150 words per minute.
 *
 * Byte stream: "MGS1", payload length (uint32 BE), the text as UTF-8, CRC-32 of the text.
 * The magic and the checksum are what let `transcribeMockWav` say null to any other audio.
 */
export type MockSpeechFormat = "wav" | "pcm";

/** The `response_format`s the mock can really produce; answer the others with a 400. */
export const supportedMockSpeechFormats: readonly MockSpeechFormat[] = ["wav", "pcm"];

/** OpenAI's `pcm` format is 24 kHz; the WAV default matches it. */
export const MOCK_SPEECH_SAMPLE_RATE = 24_000;

export interface MockSpeechOptions {
  sampleRate?: number;
  format?: MockSpeechFormat;
}

const FRAME_MAGIC = Buffer.from("MGS1", "latin1");
const FRAME_OVERHEAD = FRAME_MAGIC.length + 4 + 4;
const WORDS_PER_MINUTE = 150;
const MIN_SECONDS = 0.5;
const LEAD_IN_SYMBOLS = 5;
const MIN_PAUSE_SYMBOLS = 4;

export function isMockSpeechFormat(format: string): format is MockSpeechFormat {
  return (supportedMockSpeechFormats as readonly string[]).includes(format);
}

/** How long a person takes to say `text` at about 150 words per minute, at least half a second. */
export function speechSeconds(text: string): number {
  return Math.max(MIN_SECONDS, (countWords(text) * 60) / WORDS_PER_MINUTE);
}

/**
 * A WAV (default) or raw 16-bit little-endian PCM. Lasts `speechSeconds(text)`, longer only
 * when the text holds more bytes than that time can carry (long unbroken strings, emoji runs).
 */
export function mockSpeech(text: string, opts: MockSpeechOptions = {}): Buffer {
  const sampleRate = opts.sampleRate ?? MOCK_SPEECH_SAMPLE_RATE;
  const samples = mockSpeechSamples(text, sampleRate);
  return (opts.format ?? "wav") === "pcm" ? int16ToLe(samples) : encodeWav(samples, sampleRate);
}

export function mockSpeechSamples(text: string, sampleRate = MOCK_SPEECH_SAMPLE_RATE): Int16Array {
  if (!isModemSampleRate(sampleRate)) {
    throw new RangeError(
      `mock speech sample rate must be an integer in ${MIN_MODEM_SAMPLE_RATE}..${MAX_MODEM_SAMPLE_RATE}`,
    );
  }
  const bursts = frameIntoBursts(text);
  const targetSymbols = Math.ceil(speechSeconds(text) * SYMBOLS_PER_SECOND);
  const fairShare = Math.floor((targetSymbols - LEAD_IN_SYMBOLS) / bursts.length);
  const slots = bursts.map((burst) => Math.max(burst.length + MIN_PAUSE_SYMBOLS, fairShare));
  const usedSymbols = LEAD_IN_SYMBOLS + slots.reduce((sum, slot) => sum + slot, 0);
  const length = symbolLength(sampleRate);
  const samples = new Int16Array(Math.max(usedSymbols, targetSymbols) * length);
  let symbol = LEAD_IN_SYMBOLS;
  bursts.forEach((burst, index) => {
    for (let i = 0; i < burst.length; i++) {
      writeByteSymbol(samples, (symbol + i) * length, length, burst[i]);
    }
    symbol += slots[index];
  });
  return samples;
}

/** The text a mock-speech WAV says; null for any audio the mock did not make. */
export function transcribeMockWav(buf: Uint8Array): string | null {
  const wav = decodeWav(buf);
  return wav ? hearMockSpeech(wav) : null;
}

/** The same for a WAV already decoded. */
export function hearMockSpeech(wav: DecodedWav): string | null {
  return decodeSamples(wav.samples, wav.sampleRate);
}

const HEARD_WORDS = [
  "the",
  "signal",
  "carries",
  "a",
  "quiet",
  "voice",
  "over",
  "steady",
  "noise",
  "and",
  "someone",
  "speaks",
  "about",
  "weather",
  "trains",
  "music",
  "coffee",
  "tomorrow",
  "morning",
  "meeting",
  "plans",
  "numbers",
  "water",
  "light",
  "window",
  "garden",
  "city",
  "river",
  "road",
  "story",
  "question",
  "answer",
  "again",
  "slowly",
  "clearly",
  "today",
  "later",
  "maybe",
] as const;

/**
 * What the mock hears in a recording it did not make: sentences of plain words, about two and a
 * half a second, drawn from a hash of the samples. Same recording, same words.
 */
export function mockHeardText(data: Uint8Array, seconds: number): string {
  const random = new SeededRandom("transcript", createHash("sha256").update(data).digest("hex"));
  const total = Math.min(2_000, Math.max(3, Math.round(seconds * 2.5)));
  const sentences: string[] = [];
  for (let said = 0; said < total; ) {
    const length = Math.min(total - said, random.int(4, 12));
    const words = Array.from({ length }, () => random.pick(HEARD_WORDS));
    sentences.push(`${words[0][0].toUpperCase()}${words.join(" ").slice(1)}.`);
    said += length;
  }
  return sentences.join(" ");
}

/** Same for headerless 16-bit little-endian mono PCM, whose sample rate the caller must know. */
export function transcribeMockPcm(
  buf: Uint8Array,
  sampleRate = MOCK_SPEECH_SAMPLE_RATE,
): string | null {
  return decodeSamples(leToInt16(asBuffer(buf)), sampleRate);
}

function decodeSamples(samples: Int16Array, sampleRate: number): string | null {
  if (!isModemSampleRate(sampleRate)) return null;
  const length = symbolLength(sampleRate);
  const windows = Math.floor(samples.length / length);
  const bytes: number[] = [];
  let expected = FRAME_OVERHEAD;
  for (let window = 0; window < windows && bytes.length < expected; window++) {
    const offset = window * length;
    if (isSilentWindow(samples, offset, length)) continue;
    const byte = readByteSymbol(samples, offset, length);
    if (byte === null) return null;
    bytes.push(byte);
    if (bytes.length === FRAME_MAGIC.length && !FRAME_MAGIC.equals(Buffer.from(bytes))) return null;
    if (bytes.length === FRAME_MAGIC.length + 4) {
      const payloadLength = Buffer.from(bytes).readUInt32BE(FRAME_MAGIC.length);
      // Every remaining byte needs a window of its own; a larger claim cannot be ours.
      if (payloadLength + 4 > windows - window - 1) return null;
      expected = FRAME_OVERHEAD + payloadLength;
    }
  }
  if (bytes.length !== expected) return null;
  const frame = Buffer.from(bytes);
  const payload = frame.subarray(FRAME_MAGIC.length + 4, frame.length - 4);
  if (crc32(payload) !== frame.readUInt32BE(frame.length - 4)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(payload);
  } catch {
    return null;
  }
}

/**
 * Splits the framed bytes at word starts so each word is voiced as its own burst; the header
 * rides with the first word and the checksum with the last.
 */
function frameIntoBursts(text: string): Buffer[] {
  const encoder = new TextEncoder();
  const pieces = groupByWord(text).map((piece) => Buffer.from(encoder.encode(piece)));
  const payloadLength = pieces.reduce((sum, piece) => sum + piece.length, 0);
  const header = Buffer.alloc(FRAME_MAGIC.length + 4);
  FRAME_MAGIC.copy(header);
  header.writeUInt32BE(payloadLength, FRAME_MAGIC.length);
  const trailer = Buffer.alloc(4);
  trailer.writeUInt32BE(crc32(Buffer.concat(pieces)));
  if (pieces.length === 0) return [Buffer.concat([header, trailer])];
  pieces[0] = Buffer.concat([header, pieces[0]]);
  pieces[pieces.length - 1] = Buffer.concat([pieces[pieces.length - 1], trailer]);
  return pieces;
}

/** Word segments with the spaces and punctuation after them; leading ones join the first word. */
function groupByWord(text: string): string[] {
  const groups: string[] = [];
  let pending = "";
  for (const { segment, isWordLike } of wordSegmenter().segment(text)) {
    if (isWordLike && groups.length > 0) {
      groups[groups.length - 1] += pending;
      pending = "";
    }
    if (isWordLike) {
      groups.push(pending + segment);
      pending = "";
    } else {
      pending += segment;
    }
  }
  if (pending) {
    if (groups.length === 0) groups.push(pending);
    else groups[groups.length - 1] += pending;
  }
  return groups;
}

function countWords(text: string): number {
  let words = 0;
  for (const segment of wordSegmenter().segment(text)) if (segment.isWordLike) words++;
  return words;
}

let segmenter: Intl.Segmenter | undefined;

/** ICU word breaking also splits scripts written without spaces (Chinese, Japanese, Thai). */
function wordSegmenter(): Intl.Segmenter {
  segmenter ??= new Intl.Segmenter("en", { granularity: "word" });
  return segmenter;
}
