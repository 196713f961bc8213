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

/** A gateway key wherever it appears in text: its prefix and enough of its random part to be one. */
const gatewayKeyInText = /kn-[A-Za-z0-9_-]{8,}/g;

/**
 * `text` with every one of `secrets` (of 4 characters or more) and every gateway key in it
 * replaced: what a file or a message may hold of text that something else wrote.
 */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join("[redacted]");
  }
  return out.replace(gatewayKeyInText, "kn-[redacted]");
}

/**
 * Text that came in pieces (a stream, as the connection split it), grouped so that no secret
 * `redactSecrets` takes out runs across two groups: each group lists the indexes of the pieces it
 * joins, in order. Redacting each group's text then takes out every secret the whole text holds.
 */
export function piecesAroundSecrets(
  pieces: readonly string[],
  secrets: readonly string[],
): number[][] {
  const text = pieces.join("");
  const spans: [number, number][] = [];
  for (const secret of secrets) {
    if (secret.length < 4) continue;
    for (let at = text.indexOf(secret); at >= 0; at = text.indexOf(secret, at + secret.length))
      spans.push([at, at + secret.length]);
  }
  for (const found of text.matchAll(gatewayKeyInText))
    spans.push([found.index, found.index + found[0].length]);
  const groups: number[][] = [];
  let open: number[] = [];
  let end = 0;
  for (const [index, piece] of pieces.entries()) {
    end += piece.length;
    open.push(index);
    // A secret that starts in this piece or before and ends past it keeps the group open.
    if (!spans.some(([from, to]) => from < end && to > end)) {
      groups.push(open);
      open = [];
    }
  }
  if (open.length > 0) groups.push(open);
  return groups;
}

/**
 * A URL someone gave, as a message may quote it, parsed or not: its user and password, query and
 * fragment are where a URL carries a secret (`user:token@`, `?key=`), so each is shown as `***`,
 * and a gateway key anywhere in it is redacted.
 */
export function shownUrl(text: string): string {
  const masked = text
    .replace(/^((?:[^/?#]*\/\/)?)[^?#]*@/, "$1***@")
    .replace(/\?[^#]*/, "?***")
    .replace(/#.*$/s, "#***");
  return redactSecrets(masked, []);
}
