import { asBuffer } from "./bytes.js";
import { readChunks, readRiffHeader, riffChunk, riffList } from "./riff.js";

export interface WavInfo {
  sampleRate: number;
  channels: number;
  bitsPerSample: number;
  durationSeconds: number;
}

const FORMAT_PCM = 1;
const FORMAT_IEEE_FLOAT = 3;
const FORMAT_EXTENSIBLE = 0xfffe;
const MAX_SAMPLE_RATE = 768_000;

/** A canonical 44-byte-header WAV: PCM, 16-bit, mono. */
export function encodeWav(samples: Int16Array, sampleRate: number): Buffer {
  assertSampleRate(sampleRate);
  const format = Buffer.alloc(16);
  format.writeUInt16LE(FORMAT_PCM, 0);
  format.writeUInt16LE(1, 2); // channels
  format.writeUInt32LE(sampleRate, 4);
  format.writeUInt32LE(sampleRate * 2, 8); // byte rate
  format.writeUInt16LE(2, 12); // block align
  format.writeUInt16LE(16, 14); // bits per sample
  return riffList(
    "WAVE",
    [riffChunk("fmt ", format), riffChunk("data", int16ToLe(samples))],
    "RIFF",
  );
}

/** Raw little-endian 16-bit PCM, as OpenAI's `response_format: "pcm"` delivers it. */
export function int16ToLe(samples: Int16Array): Buffer {
  const out = Buffer.alloc(samples.length * 2);
  for (let i = 0; i < samples.length; i++) out.writeInt16LE(samples[i], i * 2);
  return out;
}

export function leToInt16(pcm: Uint8Array): Int16Array {
  const bytes = asBuffer(pcm);
  const samples = new Int16Array(bytes.length >> 1);
  for (let i = 0; i < samples.length; i++) samples[i] = bytes.readInt16LE(i * 2);
  return samples;
}

/** Validates the RIFF/WAVE structure and `fmt ` fields; null for anything that is not a WAV. */
export function readWavInfo(buf: Uint8Array): WavInfo | null {
  const layout = locateWav(asBuffer(buf));
  if (!layout) return null;
  const { format, dataBytes } = layout;
  const frames = Math.floor(dataBytes / format.blockAlign);
  return {
    sampleRate: format.sampleRate,
    channels: format.channels,
    bitsPerSample: format.bitsPerSample,
    durationSeconds: frames / format.sampleRate,
  };
}

/** The samples of a 16-bit PCM mono WAV (the only kind the mock writes); null for others. */
export function readWavPcm16Mono(
  buf: Uint8Array,
): { sampleRate: number; samples: Int16Array } | null {
  const wav = asBuffer(buf);
  const layout = locateWav(wav);
  if (!layout) return null;
  const { format, dataOffset, dataBytes } = layout;
  if (format.formatTag !== FORMAT_PCM || format.channels !== 1 || format.bitsPerSample !== 16) {
    return null;
  }
  return {
    sampleRate: format.sampleRate,
    samples: leToInt16(wav.subarray(dataOffset, dataOffset + dataBytes)),
  };
}

interface WavFormat {
  formatTag: number;
  channels: number;
  sampleRate: number;
  blockAlign: number;
  bitsPerSample: number;
}

function locateWav(
  wav: Buffer,
): { format: WavFormat; dataOffset: number; dataBytes: number } | null {
  const riff = readRiffHeader(wav);
  if (riff?.form !== "WAVE") return null;
  let format: WavFormat | null = null;
  for (const chunk of readChunks(wav, 12, riff.end)) {
    if (chunk.id === "fmt ") {
      if (chunk.truncated || chunk.size < 16) return null;
      format = parseFormat(wav, chunk.dataOffset);
      if (!format) return null;
    } else if (chunk.id === "data") {
      // fmt must come first: readers that stream cannot interpret samples they have not met.
      if (!format) return null;
      // A streamed WAV may declare more data than arrived; play what is there.
      const available = Math.min(chunk.size, riff.end - chunk.dataOffset);
      return { format, dataOffset: chunk.dataOffset, dataBytes: available };
    }
  }
  return null;
}

function parseFormat(wav: Buffer, offset: number): WavFormat | null {
  const format: WavFormat = {
    formatTag: wav.readUInt16LE(offset),
    channels: wav.readUInt16LE(offset + 2),
    sampleRate: wav.readUInt32LE(offset + 4),
    blockAlign: wav.readUInt16LE(offset + 12),
    bitsPerSample: wav.readUInt16LE(offset + 14),
  };
  const byteRate = wav.readUInt32LE(offset + 8);
  const knownTag = [FORMAT_PCM, FORMAT_IEEE_FLOAT, FORMAT_EXTENSIBLE].includes(format.formatTag);
  const validBits = [8, 16, 24, 32, 64].includes(format.bitsPerSample);
  if (!knownTag || !validBits || format.channels === 0) return null;
  if (format.sampleRate === 0 || format.sampleRate > MAX_SAMPLE_RATE) return null;
  if (format.blockAlign !== (format.channels * format.bitsPerSample) / 8) return null;
  if (byteRate !== format.sampleRate * format.blockAlign) return null;
  return format;
}

function assertSampleRate(sampleRate: number): void {
  if (!Number.isInteger(sampleRate) || sampleRate < 1 || sampleRate > MAX_SAMPLE_RATE) {
    throw new RangeError(`sample rate must be an integer in 1..${MAX_SAMPLE_RATE}`);
  }
}
