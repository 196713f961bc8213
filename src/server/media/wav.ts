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

/** Any WAV the reader understands, mixed down to mono 16-bit samples, with its raw data bytes. */
export interface DecodedWav {
  sampleRate: number;
  channels: number;
  bitsPerSample: number;
  encoding: "pcm" | "float";
  samples: Int16Array;
  /** The data chunk as stored: what a fingerprint of the recording is taken from. */
  data: Buffer;
}

/**
 * Decodes PCM (8-bit unsigned, 16, 24, 32 and 64-bit signed) and IEEE float (32, 64-bit) WAVs,
 * plain or WAVE_FORMAT_EXTENSIBLE, any channel count and rate; channels are averaged.
 */
export function decodeWav(buf: Uint8Array): DecodedWav | null {
  const wav = asBuffer(buf);
  const layout = locateWav(wav);
  if (!layout) return null;
  const { format, dataOffset, dataBytes } = layout;
  const { encoding } = format;
  const read = sampleReader(format);
  if (!read || encoding === null) return null;
  const data = wav.subarray(dataOffset, dataOffset + dataBytes);
  const frames = Math.floor(dataBytes / format.blockAlign);
  const bytesPerSample = format.bitsPerSample / 8;
  const samples = new Int16Array(frames);
  for (let frame = 0; frame < frames; frame++) {
    let sum = 0;
    for (let channel = 0; channel < format.channels; channel++) {
      sum += read(data, frame * format.blockAlign + channel * bytesPerSample);
    }
    const value = Math.round((sum / format.channels) * 32767);
    samples[frame] = Math.max(-32768, Math.min(32767, value));
  }
  return {
    sampleRate: format.sampleRate,
    channels: format.channels,
    bitsPerSample: format.bitsPerSample,
    encoding,
    samples,
    data,
  };
}

/** Reads one sample at an offset as a value in [-1, 1]; null for a layout with no such samples. */
function sampleReader(format: WavFormat): ((data: Buffer, at: number) => number) | null {
  if (format.encoding === null) return null;
  if (format.encoding === "float") {
    if (format.bitsPerSample === 32) return (data, at) => clampUnit(data.readFloatLE(at));
    if (format.bitsPerSample === 64) return (data, at) => clampUnit(data.readDoubleLE(at));
    return null;
  }
  switch (format.bitsPerSample) {
    case 8:
      return (data, at) => (data[at] - 128) / 128;
    case 16:
      return (data, at) => data.readInt16LE(at) / 32768;
    case 24:
      return (data, at) => data.readIntLE(at, 3) / 8388608;
    case 32:
      return (data, at) => data.readInt32LE(at) / 2147483648;
    case 64:
      return (data, at) => Number(data.readBigInt64LE(at)) / 2 ** 63;
    default:
      return null;
  }
}

/** NaN and out-of-range floats (allowed in float WAVs) become silence or full scale. */
function clampUnit(value: number): number {
  if (Number.isNaN(value)) return 0;
  return Math.max(-1, Math.min(1, value));
}

interface WavFormat {
  formatTag: number;
  /** What the samples are (for WAVE_FORMAT_EXTENSIBLE, its sub-format says); null if unknown. */
  encoding: "pcm" | "float" | null;
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
      format = parseFormat(wav, chunk.dataOffset, chunk.size);
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

function parseFormat(wav: Buffer, offset: number, size: number): WavFormat | null {
  const formatTag = wav.readUInt16LE(offset);
  let encoding: "pcm" | "float" | null =
    formatTag === FORMAT_PCM ? "pcm" : formatTag === FORMAT_IEEE_FLOAT ? "float" : null;
  // WAVE_FORMAT_EXTENSIBLE names the real format in the first two bytes of its sub-format GUID.
  if (formatTag === FORMAT_EXTENSIBLE && size >= 40) {
    const subFormat = wav.readUInt16LE(offset + 24);
    encoding = subFormat === FORMAT_PCM ? "pcm" : subFormat === FORMAT_IEEE_FLOAT ? "float" : null;
  }
  const format: WavFormat = {
    formatTag,
    encoding,
    channels: wav.readUInt16LE(offset + 2),
    sampleRate: wav.readUInt32LE(offset + 4),
    blockAlign: wav.readUInt16LE(offset + 12),
    bitsPerSample: wav.readUInt16LE(offset + 14),
  };
  const byteRate = wav.readUInt32LE(offset + 8);
  const knownTag = encoding !== null || formatTag === FORMAT_EXTENSIBLE;
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
