import { isAscii } from "node:buffer";
import type { IncomingMessage } from "node:http";
import type { Context } from "hono";
import type { z } from "zod";
import { badRequest, GatewayError, PlainTextError } from "../errors.js";
import { type JsonShape, jsonShape, maxJsonDepth } from "../wire/json-depth.js";
import type { AppEnv, BodyLimit } from "./context.js";
import { nodeIncoming, requestHeader } from "./request.js";

/**
 * The one body reader. The registration gives every route the limit of its part of the surface
 * (`bodyLimit`) and refuses a declared Content-Length over it from the header alone; a body
 * without one (chunked) is refused here once it passes the limit as it arrives.
 */

export const defaultBodyLimitBytes = 32 * 1024 * 1024;

export const tooDeepMessage = `Request body nests objects or arrays deeper than the limit of ${maxJsonDepth} levels.`;

export function payloadTooLarge(limit: number): GatewayError {
  const size =
    limit >= 1024 * 1024
      ? `${Math.round(limit / 1024 / 1024)} MB`
      : `${Math.round(limit / 1024)} KB`;
  return new GatewayError(413, "bad_request", `Request body is larger than the limit of ${size}.`);
}

/** The API's limit: a 413 in the route's JSON style. */
export function apiBodyLimit(bytes: number): BodyLimit {
  return { bytes, tooLarge: () => payloadTooLarge(bytes) };
}

/** A refusal of the reader for size, which callers that turn a bad body into their own answer let through. */
export function isTooLarge(err: unknown): boolean {
  return (err instanceof GatewayError || err instanceof PlainTextError) && err.status === 413;
}

/** A declared Content-Length over the limit is refused before anything else is done. */
export function refuseDeclaredLength(c: Context, limit: BodyLimit): void {
  const declared = requestHeader(c, "content-length");
  if (declared !== undefined && Number(declared) > limit.bytes) throw limit.tooLarge();
}

/** The request's body, within the route's limit. */
export async function readBody(c: Context<AppEnv>): Promise<Buffer> {
  const limit = c.get("bodyLimit") ?? apiBodyLimit(defaultBodyLimitBytes);
  const incoming = nodeIncoming(c);
  if (incoming) return readNodeBody(incoming, limit);
  let bytes: Buffer;
  try {
    bytes = Buffer.from(await c.req.arrayBuffer());
  } catch {
    throw badRequest("Request body could not be read.");
  }
  if (bytes.length > limit.bytes) throw limit.tooLarge();
  return bytes;
}

/** Reads the body as JSON and validates it; every failure is a 400 naming the problem. */
export async function readJson<T extends z.ZodType>(
  c: Context<AppEnv>,
  schema: T,
): Promise<z.infer<T>> {
  return (await readJsonWithSize(c, schema)).data;
}

/** Like readJson, for a route whose body may be left out (OpenAI's SDKs send none): empty is `{}`. */
export async function readOptionalJson<T extends z.ZodType>(
  c: Context<AppEnv>,
  schema: T,
): Promise<z.infer<T>> {
  const raw = await readBody(c);
  const text = decodeBody(raw);
  return parseJsonBody(text.trim() === "" ? "{}" : text, raw, schema).data;
}

/**
 * Like readJson, also returning the body's size in bytes (billing's bound on input tokens), its
 * bytes and text as sent, and what the walk before parsing found of its shape.
 */
export async function readJsonWithSize<T extends z.ZodType>(
  c: Context<AppEnv>,
  schema: T,
): Promise<ParsedBody<z.infer<T>>> {
  const raw = await readBody(c);
  return parseJsonBody(decodeBody(raw), raw, schema);
}

export interface ParsedBody<T> {
  data: T;
  /** The body's size in bytes. */
  bytes: number;
  /** The body as it came. */
  raw: Buffer;
  text: string;
  shape: JsonShape;
}

/**
 * The body as text. An all-ASCII body (most are) is copied byte for byte, several times faster
 * than UTF-8 decoding a long conversation.
 */
function decodeBody(bytes: Buffer): string {
  return isAscii(bytes) ? bytes.toString("latin1") : bytes.toString("utf8");
}

function parseJsonBody<T extends z.ZodType>(
  text: string,
  raw: Buffer,
  schema: T,
): ParsedBody<z.infer<T>> {
  if (text.trim() === "") throw badRequest("Request body is empty; send a JSON object.");
  const shape = jsonShape(text, maxJsonDepth);
  if (shape.tooDeep) throw badRequest(tooDeepMessage);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw badRequest("Request body is not valid JSON.");
  }
  if (!json || typeof json !== "object" || Array.isArray(json)) {
    throw badRequest("Request body must be a JSON object.");
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) throw badRequest(invalidBodyMessage(parsed.error.issues[0], json));
  return { data: parsed.data, bytes: raw.length, raw, text, shape };
}

type Issue = z.core.$ZodIssue;

/**
 * A schema's first complaint as one line naming the field: a missing field is `required`, and a
 * field of several allowed shapes says which (zod's own words for both are "Invalid input").
 */
function invalidBodyMessage(issue: Issue, body: unknown): string {
  let { path } = issue;
  let message = issue.message;
  if (valueAt(body, path) === undefined) message = "required.";
  else if (issue.code === "invalid_union") {
    const firsts = issue.errors.map((branch) => branch[0]).filter((i) => i !== undefined);
    // A branch that failed inside the value (an array's item) says more than the shapes it is not.
    const deepest = firsts.reduce<Issue | undefined>(
      (best, i) => (i.path.length > (best?.path.length ?? 0) ? i : best),
      undefined,
    );
    if (deepest) return invalidBodyMessage({ ...deepest, path: [...path, ...deepest.path] }, body);
    const expected = firsts.flatMap((i) => (i.code === "invalid_type" ? [i.expected] : []));
    if (expected.length > 0)
      message = `expected ${[...new Set(expected)].join(" or ")}, received ${typeName(valueAt(body, path))}.`;
  }
  path = path.length ? path : ["body"];
  return `Invalid request: ${path.join(".")}: ${message}`;
}

function valueAt(body: unknown, path: readonly PropertyKey[]): unknown {
  let value = body;
  for (const key of path) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  return Array.isArray(value) ? "array" : typeof value;
}

/**
 * A JSON body, or a multipart/form-data one as the openai SDK encodes its uploads (a nested field
 * `video[id]` is `{video: {id}}`, a file stays a file), validated as readJson validates.
 */
export async function readJsonOrForm<T extends z.ZodType>(
  c: Context<AppEnv>,
  schema: T,
): Promise<z.infer<T>> {
  const type = requestHeader(c, "content-type") ?? "";
  if (!/^multipart\/form-data/i.test(type)) return readJson(c, schema);
  const body = formObject(await readForm(c, "the fields of the request"));
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw badRequest(invalidBodyMessage(parsed.error.issues[0], body));
  return parsed.data;
}

/** A form's fields as an object, one level of `name[key]` nesting read back into objects. */
function formObject(form: FormData): Record<string, unknown> {
  // No prototype: a field named `__proto__` or `constructor` is a field like any other.
  const body: Record<string, unknown> = Object.create(null);
  for (const [name, value] of form.entries()) {
    const nested = /^([^[\]]+)\[([^[\]]+)\]$/.exec(name);
    if (!nested) {
      body[name] = value;
      continue;
    }
    const [, outer, key] = nested;
    const earlier = body[outer];
    const object =
      typeof earlier === "object" && earlier !== null && !(earlier instanceof Blob)
        ? (earlier as Record<string, unknown>)
        : (Object.create(null) as Record<string, unknown>);
    object[key] = value;
    body[outer] = object;
  }
  return body;
}

/** A multipart/form-data body; `what` tells the client what to send when it is not one. */
export async function readForm(c: Context<AppEnv>, what: string): Promise<FormData> {
  const type = requestHeader(c, "content-type") ?? "";
  if (!/^multipart\/form-data/i.test(type)) {
    throw badRequest(`Invalid request: send multipart/form-data with ${what}.`);
  }
  const form = await formOf(c, type);
  if (!form) throw badRequest("Request body could not be read as multipart/form-data.");
  return form;
}

/**
 * A form body (urlencoded or multipart) as fields: a repeated name keeps its last value, a name
 * ending in `[]` collects them all; any other type of body has no fields. Refusals of the reader
 * (413) are thrown; an unreadable form is undefined.
 */
export async function readFormFields(
  c: Context<AppEnv>,
): Promise<Record<string, unknown> | undefined> {
  const type = requestHeader(c, "content-type") ?? "";
  const media = type.split(";")[0].trim().toLowerCase();
  if (media !== "multipart/form-data" && media !== "application/x-www-form-urlencoded") return {};
  const form = await formOf(c, type);
  if (!form) return undefined;
  const fields: Record<string, unknown> = Object.create(null);
  form.forEach((value, name) => {
    if (!name.endsWith("[]")) fields[name] = value;
    else {
      const earlier = fields[name];
      fields[name] = Array.isArray(earlier) ? [...earlier, value] : [value];
    }
  });
  return fields;
}

/** The form's text fields (files left out), as an upstream of the same API gets them. */
export function formFields(form: FormData): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const [name, value] of form.entries()) {
    if (typeof value === "string") fields[name] = value;
  }
  return fields;
}

async function formOf(c: Context<AppEnv>, type: string): Promise<FormData | undefined> {
  let bytes: Buffer;
  try {
    bytes = await readBody(c);
  } catch (err) {
    if (isTooLarge(err)) throw err;
    return undefined;
  }
  try {
    return await new Response(bytes, { headers: { "content-type": type } }).formData();
  } catch {
    return undefined;
  }
}

/**
 * A Node request's body, refused once it passes the limit as it arrives (a chunked body has no
 * declared length; the registration checked a declared one).
 */
async function readNodeBody(incoming: IncomingMessage, limit: BodyLimit): Promise<Buffer> {
  // The usual body comes in the same packets as the headers. The route runs as soon as the
  // headers are parsed; once the parser has gone through the rest (one microtask later), such a
  // body sits whole in the stream's buffer and is taken with one read, without the flowing-mode
  // ticks. Anything else (chunked, or still on its way) is read as it arrives.
  const declared = incoming.headers["content-length"];
  await undefined;
  if (
    declared !== undefined &&
    incoming.headers["transfer-encoding"] === undefined &&
    !incoming.readableFlowing &&
    incoming.readableLength === Number(declared)
  ) {
    return (incoming.read() as Buffer | null) ?? Buffer.alloc(0);
  }
  return arrivingBody(incoming, limit);
}

function arrivingBody(incoming: IncomingMessage, limit: BodyLimit): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    const fail = (err: Error) => {
      incoming.off("data", onData);
      incoming.off("end", onEnd);
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit.bytes) fail(limit.tooLarge());
      else parts.push(chunk);
    };
    const onEnd = () => resolve(parts.length === 1 ? parts[0] : Buffer.concat(parts));
    incoming.on("data", onData);
    incoming.once("end", onEnd);
    incoming.once("error", () => fail(badRequest("Request body could not be read.")));
  });
}
