/**
 * A JSON schema as Anthropic's structured outputs accept it, transformed as the Anthropic SDK
 * transforms the schemas its clients pass (`transformJSONSchema`, lib/transform-json-schema.ts in
 * `@anthropic-ai/sdk` 1.14). Anthropic refuses constraint keywords such as `minimum`, `maximum`,
 * `minLength` or `pattern`, which OpenAI clients send freely (the Agents SDK's integer fields): each
 * node keeps what Anthropic accepts, and the rest is written into its `description` for the model to
 * read. Every object gets `additionalProperties: false`.
 *
 * Two differences from the SDK, because a gateway must not fail on a client's schema: a node with
 * no type (nor anyOf/oneOf/allOf/enum/const), which the SDK refuses to transform, is transformed
 * all the same; and draft-07 `definitions` are transformed in place like `$defs`, so the `$ref`s
 * that point into them still resolve.
 */

import { isRecord, type JsonObject } from "./shared.js";

const supportedStringFormats = new Set([
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "uri",
  "ipv4",
  "ipv6",
  "uuid",
]);

const isPrimitive = (value: unknown) => value === null || typeof value !== "object";

export function toAnthropicSchema(schema: JsonObject): JsonObject {
  return transformNode({ ...schema });
}

/** A sub-schema; `true`/`false` and other non-object schemas pass as they are. */
function transformValue(value: unknown): unknown {
  return isRecord(value) ? transformNode({ ...value }) : value;
}

/** Moves what Anthropic accepts from `rest` (a shallow copy it may consume) into a new node. */
function transformNode(rest: JsonObject): JsonObject {
  const out: JsonObject = {};
  const take = (key: string): unknown => {
    const value = rest[key];
    delete rest[key];
    return value;
  };

  for (const key of ["$defs", "definitions"]) {
    const defs = take(key);
    if (isRecord(defs)) {
      out[key] = Object.fromEntries(
        Object.entries(defs).map(([name, def]) => [name, transformValue(def)]),
      );
    } else if (defs !== undefined) {
      rest[key] = defs;
    }
  }

  const ref = take("$ref");
  if (ref !== undefined) {
    out.$ref = ref;
    return out;
  }

  const enumValues = rest.enum;
  if (Array.isArray(enumValues) && enumValues.length > 0 && enumValues.every(isPrimitive)) {
    out.enum = take("enum");
  }
  if (rest.const !== undefined && isPrimitive(rest.const)) out.const = take("const");

  const hasLiterals = "enum" in out || "const" in out;
  const declaredType = take("type");
  const type = hasLiterals ? undefined : declaredType;
  const anyOf = take("anyOf");
  const oneOf = take("oneOf");
  const allOf = take("allOf");
  // `$schema` names the dialect and constrains nothing, so it stays out of the description.
  take("$schema");

  if (Array.isArray(anyOf)) out.anyOf = anyOf.map(transformValue);
  else if (Array.isArray(oneOf)) out.anyOf = oneOf.map(transformValue);
  else if (Array.isArray(allOf)) out.allOf = allOf.map(transformValue);
  else if (type !== undefined) out.type = type;

  const description = take("description");
  if (description !== undefined) out.description = description;
  const title = take("title");
  if (title !== undefined) out.title = title;

  if (type === "object") {
    const properties = take("properties");
    out.properties = Object.fromEntries(
      Object.entries(isRecord(properties) ? properties : {}).map(([key, value]) => [
        key,
        transformValue(value),
      ]),
    );
    take("additionalProperties");
    out.additionalProperties = false;
    const required = take("required");
    if (required !== undefined) out.required = required;
  } else if (type === "string") {
    const format = take("format");
    if (typeof format === "string" && supportedStringFormats.has(format)) out.format = format;
    else if (format !== undefined) rest.format = format;
  } else if (type === "array") {
    const items = take("items");
    if (items !== undefined) out.items = transformValue(items);
    const minItems = take("minItems");
    if (minItems === 0 || minItems === 1) out.minItems = minItems;
    else if (minItems !== undefined) rest.minItems = minItems;
  }

  const leftover = Object.entries(rest);
  if (leftover.length > 0) {
    const existing = out.description;
    out.description = `${existing ? `${existing}\n\n` : ""}{${leftover
      .map(([key, value]) => `${key}: ${JSON.stringify(value)}`)
      .join(", ")}}`;
  }
  return out;
}
