/** Small helpers shared by the translators. Nothing here knows a wire format. */

import { randomBytes } from "node:crypto";
import { maxJsonDepth, nestedDeeperThan } from "../json-depth.js";

export type JsonObject = { [key: string]: unknown };

export function isRecord(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

export function asString(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

export function asNumber(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** `prefix` + 24 random base62 characters, the look of real OpenAI/Anthropic ids. */
export function randomId(prefix: string, length = 24): string {
  const bytes = randomBytes(length);
  let out = prefix;
  for (const byte of bytes) out += ALPHABET[byte % ALPHABET.length];
  return out;
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/**
 * Tool-call arguments (a JSON string on the OpenAI side) as the object Anthropic
 * requires for `input`. Empty or broken JSON (e.g. a call cut off by max_tokens)
 * becomes `{}`: Anthropic rejects anything that is not an object. So do arguments
 * nested too deep to encode again (JSON.stringify recurses and would overflow).
 */
export function argumentsToInput(args: unknown): JsonObject {
  if (isRecord(args)) return args;
  if (typeof args !== "string" || args.trim() === "") return {};
  if (nestedDeeperThan(args, maxJsonDepth)) return {};
  try {
    const parsed: unknown = JSON.parse(args);
    return isRecord(parsed) ? parsed : {};
  } catch {
    return {};
  }
}

/** Tool input (any JSON value on the Anthropic side) as the OpenAI arguments string. */
export function inputToArguments(input: unknown): string {
  if (input === undefined || input === null) return "{}";
  if (typeof input === "string") return input;
  return JSON.stringify(input);
}

/**
 * Splits a base64 `data:` URL into its media type and payload. The type is given as registered: lower case, and
 * `image/jpg` (which OpenAI takes and many clients write) as `image/jpeg`, the only JPEG type
 * Gemini and Anthropic accept.
 */
export function parseDataUrl(url: string): { mediaType: string; data: string } | null {
  const match = /^data:([^;,]+)?((?:;[^;,]*)*?);base64,(.*)$/s.exec(url);
  if (!match) return null;
  const mediaType = match[1]?.toLowerCase() ?? "application/octet-stream";
  return { mediaType: mediaType === "image/jpg" ? "image/jpeg" : mediaType, data: match[3] };
}

export function toDataUrl(mediaType: string, data: string): string {
  return `data:${mediaType};base64,${data}`;
}

/** Ensures a JSON schema is usable as an Anthropic `input_schema` (it must be an object schema). */
export function objectSchema(schema: unknown): JsonObject {
  if (isRecord(schema) && Object.keys(schema).length > 0) {
    return schema.type === undefined ? { type: "object", ...schema } : schema;
  }
  return { type: "object", properties: {} };
}

/** The `type`s of the request's tools that match `pattern` (tools another provider cannot run). */
export function toolTypesMatching(tools: unknown, pattern: RegExp): string[] {
  return asArray(tools)
    .filter(isRecord)
    .map((tool) => asString(tool.type) ?? "")
    .filter((type) => pattern.test(type));
}

/**
 * Fields of a provider-run tool's item that no other model can read (a program's replay
 * `fingerprint`), or that only name it.
 */
const unreadableFields = new Set([
  "type",
  "id",
  "call_id",
  "tool_use_id",
  "approval_request_id",
  "container_id",
  "cache_control",
  "caller",
  "citations",
  "signature",
  "encrypted_content",
  "encrypted_stdout",
  "input_schema",
  "fingerprint",
  "annotations",
]);

/**
 * A tool call or result that its provider ran (a web search, code execution, an MCP call), as text
 * for a model of another wire, which has no such item: `[heading]`, then each readable field as a
 * `path: value` line. Ids, signatures and encrypted or base64 payloads, which only the provider
 * that made them reads, are left out; so is a `completed` status (any other is said).
 */
export function providerToolText(heading: string, item: JsonObject): string {
  const lines = [`[${heading}]`];
  const walk = (value: unknown, path: string, depth: number): void => {
    if (depth > 8 || value === null || value === undefined) return;
    if (Array.isArray(value)) {
      for (const inner of value) walk(inner, path, depth + 1);
      return;
    }
    if (isRecord(value)) {
      for (const [key, inner] of Object.entries(value)) {
        if (unreadableFields.has(key) || (key === "status" && inner === "completed")) continue;
        if (key === "data" && value.type === "base64") continue;
        walk(inner, path ? `${path}.${key}` : key, depth + 1);
      }
      return;
    }
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean")
      lines.push(`${path}: ${String(value)}`);
  };
  walk(item, "", 0);
  return lines.join("\n");
}

/** The name a chat tool or tool choice gives under its type (`{type: "custom", custom: {name}}`). */
export function chatToolName(of: JsonObject): unknown {
  const inner = of[String(of.type)];
  return isRecord(inner) ? inner.name : undefined;
}

/**
 * A tool the client lets only a program call (`allowed_callers` without `direct`): the program
 * (Anthropic's code execution, OpenAI's programmatic tool calling) runs on its own provider's API
 * only, so toward another wire the tool is left out, and the model must not call it itself.
 */
export function programOnly(tool: JsonObject): boolean {
  const callers = tool.allowed_callers;
  return Array.isArray(callers) && callers.length > 0 && !callers.includes("direct");
}
