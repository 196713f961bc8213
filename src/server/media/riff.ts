/**
 * The RIFF container shared by WAV and AVI: little-endian chunks of a four-character id, a
 * 32-bit size and data padded to an even length; LIST chunks nest further chunks.
 */
export interface RiffChunk {
  id: string;
  /** Where the chunk's data starts (after its 8-byte header). */
  dataOffset: number;
  /** Declared size, without the pad byte. */
  size: number;
  /** The declared size runs past the end of the enclosing data (a truncated or streamed file). */
  truncated: boolean;
}

export function riffChunk(id: string, data: Uint8Array): Buffer {
  const padded = data.length + (data.length & 1);
  const chunk = Buffer.alloc(8 + padded);
  chunk.write(fourCc(id), 0, "latin1");
  chunk.writeUInt32LE(data.length, 4);
  chunk.set(data, 8);
  return chunk;
}

/** A LIST chunk, or the outer RIFF chunk when `outerId` is "RIFF". */
export function riffList(
  listType: string,
  children: readonly Uint8Array[],
  outerId = "LIST",
): Buffer {
  return riffChunk(outerId, Buffer.concat([Buffer.from(fourCc(listType), "latin1"), ...children]));
}

/**
 * Lists the chunks in `buf[start, end)`. A chunk whose header does not fit ends the walk; a chunk
 * whose data does not fit is reported with `truncated` and ends the walk, so callers decide.
 */
export function readChunks(buf: Buffer, start: number, end: number): RiffChunk[] {
  const chunks: RiffChunk[] = [];
  let offset = start;
  while (offset + 8 <= end) {
    const id = buf.toString("latin1", offset, offset + 4);
    const size = buf.readUInt32LE(offset + 4);
    const dataOffset = offset + 8;
    const truncated = dataOffset + size > end;
    chunks.push({ id, dataOffset, size, truncated });
    if (truncated) break;
    offset = dataOffset + size + (size & 1);
  }
  return chunks;
}

export interface RiffHeader {
  /** The form type: "WAVE", "AVI ". */
  form: string;
  /** End of the RIFF data, never past the buffer. */
  end: number;
  /** The declared size runs past the buffer: a truncated file, or a streamed one (size 0 or ~0). */
  truncated: boolean;
}

export function readRiffHeader(buf: Buffer): RiffHeader | null {
  if (buf.length < 12 || buf.toString("latin1", 0, 4) !== "RIFF") return null;
  const declaredEnd = 8 + buf.readUInt32LE(4);
  const truncated = declaredEnd < 12 || declaredEnd > buf.length;
  return {
    form: buf.toString("latin1", 8, 12),
    end: truncated ? buf.length : declaredEnd,
    truncated,
  };
}

function fourCc(id: string): string {
  if (!/^[\x20-\x7e]{4}$/.test(id)) throw new RangeError(`not a four-character code: ${id}`);
  return id;
}
