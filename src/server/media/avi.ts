import { asBuffer } from "./bytes.js";
import { type RiffChunk, readChunks, readRiffHeader, riffChunk, riffList } from "./riff.js";

/**
 * Uncompressed AVI (RIFF 'AVI ', one 'vids' stream, 'DIB ' 24-bit frames, idx1 index): the
 * simplest video container every player and ffprobe reads, writable without a codec.
 */
export interface AviInfo {
  width: number;
  height: number;
  frames: number;
  fps: number;
  durationSeconds: number;
}

/** Frames are DIB pixel data: bottom row first, BGR, each row padded to four bytes. */
export interface DibVideo {
  width: number;
  height: number;
  fps: number;
  frames: readonly Uint8Array[];
}

const AVIF_HAS_INDEX = 0x10;
const AVIIF_KEYFRAME = 0x10;
const VIDEO_CHUNK_ID = "00db";
const BI_RGB = 0;

export function dibStride(width: number): number {
  return (width * 3 + 3) & ~3;
}

export function dibFrameBytes(width: number, height: number): number {
  return dibStride(width) * height;
}

export function encodeAvi(video: DibVideo): Buffer {
  const { width, height, fps, frames } = video;
  const frameBytes = dibFrameBytes(width, height);
  for (const frame of frames) {
    if (frame.length !== frameBytes)
      throw new RangeError(`every frame must be ${frameBytes} bytes`);
  }

  const mainHeader = Buffer.alloc(56);
  mainHeader.writeUInt32LE(Math.round(1_000_000 / fps), 0); // microseconds per frame
  mainHeader.writeUInt32LE(frameBytes * fps, 4); // max bytes per second
  mainHeader.writeUInt32LE(AVIF_HAS_INDEX, 12);
  mainHeader.writeUInt32LE(frames.length, 16);
  mainHeader.writeUInt32LE(1, 24); // streams
  mainHeader.writeUInt32LE(frameBytes + 8, 28); // suggested buffer: a chunk with its header
  mainHeader.writeUInt32LE(width, 32);
  mainHeader.writeUInt32LE(height, 36);

  const streamHeader = Buffer.alloc(56);
  streamHeader.write("vids", 0, "latin1");
  streamHeader.write("DIB ", 4, "latin1");
  streamHeader.writeUInt32LE(1, 20); // scale: rate / scale = frames per second
  streamHeader.writeUInt32LE(fps, 24);
  streamHeader.writeUInt32LE(frames.length, 32);
  streamHeader.writeUInt32LE(frameBytes, 36);
  streamHeader.writeInt32LE(-1, 40); // quality: driver default
  streamHeader.writeInt16LE(width, 52); // rcFrame right
  streamHeader.writeInt16LE(height, 54); // rcFrame bottom

  const bitmapHeader = Buffer.alloc(40);
  bitmapHeader.writeUInt32LE(40, 0);
  bitmapHeader.writeInt32LE(width, 4);
  bitmapHeader.writeInt32LE(height, 8); // positive: bottom-up rows, what DIB decoders expect
  bitmapHeader.writeUInt16LE(1, 12); // planes
  bitmapHeader.writeUInt16LE(24, 14);
  bitmapHeader.writeUInt32LE(BI_RGB, 16);
  bitmapHeader.writeUInt32LE(frameBytes, 20);

  const headerList = riffList("hdrl", [
    riffChunk("avih", mainHeader),
    riffList("strl", [riffChunk("strh", streamHeader), riffChunk("strf", bitmapHeader)]),
  ]);
  const movieList = riffList(
    "movi",
    frames.map((frame) => riffChunk(VIDEO_CHUNK_ID, frame)),
  );
  // idx1 offsets count from the 'movi' list type, so the first chunk sits at 4.
  const index = Buffer.alloc(16 * frames.length);
  const chunkSpan = 8 + frameBytes + (frameBytes & 1);
  frames.forEach((_, i) => {
    index.write(VIDEO_CHUNK_ID, i * 16, "latin1");
    index.writeUInt32LE(AVIIF_KEYFRAME, i * 16 + 4);
    index.writeUInt32LE(4 + i * chunkSpan, i * 16 + 8);
    index.writeUInt32LE(frameBytes, i * 16 + 12);
  });
  return riffList("AVI ", [headerList, movieList, riffChunk("idx1", index)], "RIFF");
}

export function readAviInfo(buf: Uint8Array): AviInfo | null {
  return readAvi(buf)?.info ?? null;
}

export interface ParsedAvi {
  info: AviInfo;
  bitCount: number;
  compression: number;
  /** Views into the input buffer, in playback order. */
  frames: Buffer[];
}

/** Validates the structure and finds the frames of the first video stream; null if not AVI. */
export function readAvi(buf: Uint8Array): ParsedAvi | null {
  const avi = asBuffer(buf);
  const riff = readRiffHeader(avi);
  if (riff?.form !== "AVI " || riff.truncated) return null;
  const top = readChunks(avi, 12, riff.end);
  if (top.some((chunk) => chunk.truncated)) return null;
  const headerList = findList(avi, top, "hdrl");
  const movieList = findList(avi, top, "movi");
  if (!headerList || !movieList) return null;

  const headers = childrenOf(avi, headerList);
  const mainHeader = headers?.find((chunk) => chunk.id === "avih");
  if (!headers || !mainHeader || mainHeader.size < 56) return null;
  const stream = findVideoStream(avi, headers);
  if (!stream) return null;

  const frames = collectFrames(avi, movieList, stream.chunkIds);
  if (!frames) return null;
  const index = top.find((chunk) => chunk.id === "idx1");
  if (index && !indexAgrees(avi, index, stream.chunkIds, frames.length)) return null;

  const { width, height, fps } = stream;
  return {
    info: { width, height, frames: frames.length, fps, durationSeconds: frames.length / fps },
    bitCount: stream.bitCount,
    compression: stream.compression,
    frames,
  };
}

interface VideoStream {
  chunkIds: readonly string[];
  width: number;
  height: number;
  fps: number;
  bitCount: number;
  compression: number;
}

function findVideoStream(avi: Buffer, headers: RiffChunk[]): VideoStream | null {
  const streamLists = headers.filter((chunk) => isList(avi, chunk, "strl"));
  for (const [streamNumber, list] of streamLists.entries()) {
    const parts = childrenOf(avi, list);
    const streamHeader = parts?.find((chunk) => chunk.id === "strh");
    const format = parts?.find((chunk) => chunk.id === "strf");
    if (!streamHeader || streamHeader.size < 56) return null;
    // Audio and text streams come with shorter formats; only the first video stream matters.
    if (avi.toString("latin1", streamHeader.dataOffset, streamHeader.dataOffset + 4) !== "vids") {
      continue;
    }
    if (!format || format.size < 40) return null;
    const scale = avi.readUInt32LE(streamHeader.dataOffset + 20);
    const rate = avi.readUInt32LE(streamHeader.dataOffset + 24);
    const width = avi.readInt32LE(format.dataOffset + 4);
    const height = Math.abs(avi.readInt32LE(format.dataOffset + 8));
    if (scale === 0 || rate === 0 || width <= 0 || height === 0) return null;
    const prefix = String(streamNumber).padStart(2, "0");
    return {
      // 'db' is an uncompressed frame, 'dc' a compressed one; both are frames of this stream.
      chunkIds: [`${prefix}db`, `${prefix}dc`],
      width,
      height,
      fps: rate / scale,
      bitCount: avi.readUInt16LE(format.dataOffset + 14),
      compression: avi.readUInt32LE(format.dataOffset + 16),
    };
  }
  return null;
}

function collectFrames(
  avi: Buffer,
  movieList: RiffChunk,
  chunkIds: readonly string[],
): Buffer[] | null {
  const children = childrenOf(avi, movieList);
  if (!children) return null;
  const frames: Buffer[] = [];
  for (const chunk of children) {
    // Interleaved files group a frame with its audio in 'rec ' lists.
    if (isList(avi, chunk, "rec ")) {
      const grouped = collectFrames(avi, chunk, chunkIds);
      if (!grouped) return null;
      frames.push(...grouped);
    } else if (chunkIds.includes(chunk.id)) {
      frames.push(avi.subarray(chunk.dataOffset, chunk.dataOffset + chunk.size));
    }
  }
  return frames;
}

function indexAgrees(
  avi: Buffer,
  index: RiffChunk,
  chunkIds: readonly string[],
  frames: number,
): boolean {
  if (index.size % 16 !== 0) return false;
  let indexed = 0;
  for (let entry = index.dataOffset; entry < index.dataOffset + index.size; entry += 16) {
    if (chunkIds.includes(avi.toString("latin1", entry, entry + 4))) indexed++;
  }
  return indexed === frames;
}

function findList(avi: Buffer, chunks: RiffChunk[], listType: string): RiffChunk | undefined {
  return chunks.find((chunk) => isList(avi, chunk, listType));
}

function isList(avi: Buffer, chunk: RiffChunk, listType: string): boolean {
  return (
    chunk.id === "LIST" &&
    chunk.size >= 4 &&
    avi.toString("latin1", chunk.dataOffset, chunk.dataOffset + 4) === listType
  );
}

function childrenOf(avi: Buffer, list: RiffChunk): RiffChunk[] | null {
  const children = readChunks(avi, list.dataOffset + 4, list.dataOffset + list.size);
  return children.some((chunk) => chunk.truncated) ? null : children;
}
