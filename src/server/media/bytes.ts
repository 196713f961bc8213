/** Callers may hand us any Uint8Array; Buffer's typed readers need a Buffer view of the same memory. */
export function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}
