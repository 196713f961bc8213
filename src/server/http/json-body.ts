import type { IncomingMessage } from "node:http";
import type { Context } from "hono";
import type { z } from "zod";
import { badRequest, GatewayError } from "../errors.js";
import { maxJsonDepth, nestedDeeperThan } from "../wire/json-depth.js";

export const defaultBodyLimitBytes = 32 * 1024 * 1024;

export const tooDeepMessage = `Request body nests objects or arrays deeper than the limit of ${maxJsonDepth} levels.`;

export function payloadTooLarge(limit: number): GatewayError {
  return new GatewayError(
    413,
    "bad_request",
    `Request body is larger than the limit of ${Math.round(limit / 1024 / 1024)} MB.`,
  );
}

/** Reads the body as JSON and validates it; every failure is a 400 naming the problem. */
export async function readJson<T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> {
  return (await readJsonWithSize(c, schema)).data;
}

/** Like readJson, also returning the body's size in bytes (billing's bound on input tokens). */
export async function readJsonWithSize<T extends z.ZodType>(
  c: Context,
  schema: T,
): Promise<{ data: z.infer<T>; bytes: number }> {
  let text: string;
  try {
    text = await c.req.text();
  } catch (err) {
    if (err instanceof GatewayError) throw err;
    throw badRequest("Request body could not be read.");
  }
  return parseJsonBody(text, schema);
}

/** Parses and validates a request body; every failure is a 400 naming the problem. */
export function parseJsonBody<T extends z.ZodType>(
  text: string,
  schema: T,
): { data: z.infer<T>; bytes: number } {
  if (text.trim() === "") throw badRequest("Request body is empty; send a JSON object.");
  if (nestedDeeperThan(text, maxJsonDepth)) throw badRequest(tooDeepMessage);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw badRequest("Request body is not valid JSON.");
  }
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) {
    throw badRequest("Request body must be a JSON object.");
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue.path.length ? issue.path.join(".") : "body";
    throw badRequest(`Invalid request: ${path}: ${issue.message}`);
  }
  return { data: parsed.data, bytes: Buffer.byteLength(text) };
}

/** A declared Content-Length over the limit is refused before anything else is done. */
export function refuseDeclaredLength(contentLength: string | undefined, limit: number): void {
  if (contentLength !== undefined && Number(contentLength) > limit) throw payloadTooLarge(limit);
}

/**
 * A Node request's body as text, refused with 413 once it passes `limit` bytes as it arrives
 * (a chunked body has no declared length; the caller checks a declared one first).
 */
export async function readNodeBody(incoming: IncomingMessage, limit: number): Promise<string> {
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
    const whole = incoming.read() as Buffer | null;
    return whole ? whole.toString("utf8") : "";
  }
  return arrivingBody(incoming, limit);
}

function arrivingBody(incoming: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    const fail = (err: GatewayError) => {
      incoming.off("data", onData);
      incoming.off("end", onEnd);
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) fail(payloadTooLarge(limit));
      else parts.push(chunk);
    };
    const onEnd = () =>
      resolve(
        parts.length === 1 ? parts[0].toString("utf8") : Buffer.concat(parts).toString("utf8"),
      );
    incoming.on("data", onData);
    incoming.once("end", onEnd);
    incoming.once("error", () => fail(badRequest("Request body could not be read.")));
  });
}
