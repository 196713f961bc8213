import type { Context } from "hono";
import type { z } from "zod";
import { badRequest, GatewayError } from "../errors.js";

export const defaultBodyLimitBytes = 32 * 1024 * 1024;

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
  if (text.trim() === "") throw badRequest("Request body is empty; send a JSON object.");
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
