import { hash, randomBytes, randomFillSync, timingSafeEqual } from "node:crypto";

/** A gateway key: `kn-` + 32 random bytes in base64url (43 characters). */
export function newGatewayKey(): string {
  return `kn-${randomBytes(32).toString("base64url")}`;
}

/** Every /v1 request hashes its key: the one-shot `hash` costs less than half of a Hash object. */
export function hashSecret(value: string): string {
  return hash("sha256", value, "hex");
}

/** What may be shown of a key after creation: enough to tell keys apart, never enough to use one. */
export function keyPrefix(value: string): string {
  return value.slice(0, 7);
}

/** Random bytes drawn in bulk: an id per request must not cost a call into the CSPRNG each. */
const idPool = Buffer.alloc(4096);
let idPoolOffset = idPool.length;

export function newId(prefix: string, bytes = 12): string {
  if (idPoolOffset + bytes > idPool.length) {
    randomFillSync(idPool);
    idPoolOffset = 0;
  }
  const id = idPool.toString("base64url", idPoolOffset, idPoolOffset + bytes);
  idPoolOffset += bytes;
  return `${prefix}_${id}`;
}

export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString("base64url");
}

export function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}
