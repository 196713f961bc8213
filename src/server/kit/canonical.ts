import { createHash } from "node:crypto";

/**
 * The canonical form of an upstream request, which names and matches a cassette: the provider,
 * the path under the provider's base URL and the body with its keys sorted. Credentials travel in
 * headers, which are left out (but for `anthropic-beta`, which changes the answer); fields that
 * change from run to run without changing the answer are dropped.
 */
export interface CanonicalRequest {
  provider: string;
  method: string;
  path: string;
  headers?: Record<string, string>;
  body: unknown;
}

/** Per-user or per-session tags: they differ between runs and never change what a model says. */
const volatileFields = ["user", "safety_identifier", "prompt_cache_key"];

/** JSON text with object keys sorted at every depth, so equal requests hash equal. */
function sortedJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      out[key] = sortKeys((value as Record<string, unknown>)[key]);
    }
    return out;
  }
  return value;
}

export function requestHash(request: CanonicalRequest): string {
  return createHash("sha256").update(sortedJson(request)).digest("hex");
}

/** The body as sent, in a form that compares equal whenever the provider would see the same. */
export function canonicalBody(body: string | Uint8Array, contentType: string): unknown {
  const bytes = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  if (contentType.startsWith("application/json")) {
    try {
      const parsed: unknown = JSON.parse(bytes.toString("utf8"));
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) {
        const copy: Record<string, unknown> = { ...(parsed as Record<string, unknown>) };
        for (const field of volatileFields) delete copy[field];
        const metadata = copy.metadata;
        if (metadata && typeof metadata === "object" && "user_id" in metadata) {
          const { user_id: _, ...rest } = metadata as Record<string, unknown>;
          copy.metadata = rest;
        }
        return sortKeys(copy);
      }
      return sortKeys(parsed);
    } catch {
      // Not JSON after all: compared by digest below.
    }
  }
  const boundary = /boundary=([^;]+)/.exec(contentType)?.[1];
  if (contentType.startsWith("multipart/form-data") && boundary) {
    return multipartFields(bytes, boundary);
  }
  return { bytes: bytes.length, sha256: digest(bytes) };
}

function digest(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Form fields by name; a file as its name, type, size and digest (the boundary is random). */
function multipartFields(bytes: Buffer, boundary: string): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  const delimiter = Buffer.from(`--${boundary}`);
  let at = bytes.indexOf(delimiter);
  while (at !== -1) {
    const start = at + delimiter.length + 2;
    const next = bytes.indexOf(delimiter, start);
    if (next === -1) break;
    const part = bytes.subarray(start, next - 2);
    const split = part.indexOf("\r\n\r\n");
    if (split !== -1) {
      const head = part.subarray(0, split).toString("utf8");
      const content = part.subarray(split + 4);
      const name = /name="([^"]*)"/.exec(head)?.[1] ?? "";
      const filename = /filename="([^"]*)"/.exec(head)?.[1];
      fields[name] =
        filename === undefined
          ? content.toString("utf8")
          : {
              filename,
              content_type: /content-type:\s*([^\r\n]+)/i.exec(head)?.[1] ?? "",
              bytes: content.length,
              sha256: digest(content),
            };
    }
    at = next;
  }
  return sortKeys(fields) as Record<string, unknown>;
}

/** A readable file-name slug: provider, model and the first words of what the user asked. */
export function slugOf(request: CanonicalRequest): string {
  const body = (request.body ?? {}) as Record<string, unknown>;
  const model = typeof body.model === "string" ? body.model : "";
  const words = lastUserText(body).split(/\s+/).filter(Boolean).slice(0, 6).join(" ");
  const slug = [request.provider, model, words]
    .join("-")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  return slug.slice(0, 80).replace(/-+$/, "") || "exchange";
}

function lastUserText(body: Record<string, unknown>): string {
  for (const key of ["prompt", "input"] as const) {
    if (typeof body[key] === "string") return body[key];
  }
  const turns = Array.isArray(body.messages)
    ? body.messages
    : Array.isArray(body.input)
      ? body.input
      : [];
  for (let i = turns.length - 1; i >= 0; i--) {
    const turn = turns[i] as { role?: unknown; content?: unknown };
    if (turn?.role === "user") return textOf(turn.content);
  }
  return "";
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part) => {
      const p = part as { text?: unknown };
      return typeof p?.text === "string" ? p.text : "";
    })
    .join(" ");
}

/**
 * The first JSON path where `now` and `recorded` differ (`messages[1].content`), keys in sorted
 * order, or undefined when they are equal.
 */
export function firstDifference(now: unknown, recorded: unknown, path = ""): string | undefined {
  if (Array.isArray(now) && Array.isArray(recorded)) {
    for (let i = 0; i < Math.max(now.length, recorded.length); i++) {
      if (i >= now.length || i >= recorded.length) return `${path}[${i}]`;
      const found = firstDifference(now[i], recorded[i], `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (isObject(now) && isObject(recorded)) {
    const keys = [...new Set([...Object.keys(now), ...Object.keys(recorded)])].sort();
    for (const key of keys) {
      const at = path ? `${path}.${key}` : key;
      if (!(key in now) || !(key in recorded)) return at;
      const found = firstDifference(now[key], recorded[key], at);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  return now === recorded ? undefined : path || "(body)";
}

/** How far apart two requests are, leaf by leaf: the nearest cassette is the closest. */
export function differenceCount(a: unknown, b: unknown): number {
  if (Array.isArray(a) && Array.isArray(b)) {
    let n = Math.abs(a.length - b.length);
    for (let i = 0; i < Math.min(a.length, b.length); i++) n += differenceCount(a[i], b[i]);
    return n;
  }
  if (isObject(a) && isObject(b)) {
    let n = 0;
    for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
      n += key in a && key in b ? differenceCount(a[key], b[key]) : 1;
    }
    return n;
  }
  if (typeof a === "string" && typeof b === "string") return textDistance(a, b);
  return a === b ? 0 : 1;
}

/** Between 0 (equal) and 1 (nothing in common at either end), so a small edit counts less. */
function textDistance(a: string, b: string): number {
  if (a === b) return 0;
  const longest = Math.max(a.length, b.length);
  let prefix = 0;
  while (prefix < Math.min(a.length, b.length) && a[prefix] === b[prefix]) prefix++;
  let suffix = 0;
  while (
    suffix < Math.min(a.length, b.length) - prefix &&
    a[a.length - 1 - suffix] === b[b.length - 1 - suffix]
  )
    suffix++;
  return 1 - (prefix + suffix) / longest;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The value at a path found by firstDifference, for the miss message. */
export function valueAt(root: unknown, path: string): unknown {
  if (path === "(body)") return root;
  let value: unknown = root;
  for (const part of path.match(/[^.[\]]+/g) ?? []) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/**
 * A URL path under the provider's base URL (`/v1/chat/completions` -> `/chat/completions`), without
 * the base's own query (`joinUrl` puts it first): that may hold a secret, and names no call.
 */
export function relativePath(path: string, baseUrl: string | null): string {
  if (!baseUrl) return path;
  let base: URL;
  try {
    base = new URL(baseUrl);
  } catch {
    return path;
  }
  const baseQuery = base.search.slice(1);
  if (baseQuery) {
    const mark = path.indexOf("?");
    const query = mark < 0 ? "" : path.slice(mark + 1);
    if (query === baseQuery) path = path.slice(0, mark);
    else if (query.startsWith(`${baseQuery}&`))
      path = `${path.slice(0, mark)}?${query.slice(baseQuery.length + 1)}`;
  }
  const root = base.pathname.replace(/\/+$/, "");
  return root && path.startsWith(root) ? path.slice(root.length) || "/" : path;
}
