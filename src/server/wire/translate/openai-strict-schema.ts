/**
 * Whether a JSON schema is one OpenAI's strict structured outputs (`strict: true` on a
 * `json_schema` response format or a function) accept, so that a schema which must hold (as
 * Anthropic's structured outputs and strict tools always do) is enforced on an openai wire too.
 * OpenAI refuses a strict schema outside these rules, where the same schema sent non-strict is
 * answered: a schema that does not meet them goes non-strict rather than fail the request.
 *
 * The rules (OpenAI's structured-outputs guide): the root is an object; every object lists all
 * its properties in `required` and sets `additionalProperties: false`; at most ten levels of
 * objects; only the keywords and string formats below.
 */

import { asArray, isRecord } from "./shared.js";

const keywords = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "anyOf",
  "enum",
  "const",
  "description",
  "title",
  "$defs",
  "definitions",
  "$ref",
  "pattern",
  "format",
  "multipleOf",
  "maximum",
  "exclusiveMaximum",
  "minimum",
  "exclusiveMinimum",
  "minItems",
  "maxItems",
]);

const formats = new Set([
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "ipv4",
  "ipv6",
  "uuid",
]);

const mostObjectLevels = 10;

export function meetsOpenAIStrictRules(schema: unknown): boolean {
  return isRecord(schema) && schema.type === "object" && strictNode(schema, 0);
}

function strictNode(schema: unknown, objectLevels: number): boolean {
  if (!isRecord(schema)) return false;
  for (const key of Object.keys(schema)) if (!keywords.has(key)) return false;
  if (schema.format !== undefined && !formats.has(String(schema.format))) return false;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  const isObject = types.includes("object") || schema.properties !== undefined;
  let levels = objectLevels;
  if (isObject) {
    levels += 1;
    if (levels > mostObjectLevels || schema.additionalProperties !== false) return false;
    const properties = isRecord(schema.properties) ? schema.properties : {};
    const required = asArray(schema.required);
    if (!Object.keys(properties).every((name) => required.includes(name))) return false;
    if (!Object.values(properties).every((child) => strictNode(child, levels))) return false;
  }
  if (schema.items !== undefined && !strictNode(schema.items, levels)) return false;
  if (schema.anyOf !== undefined) {
    if (!Array.isArray(schema.anyOf) || !schema.anyOf.every((c) => strictNode(c, levels)))
      return false;
  }
  for (const key of ["$defs", "definitions"]) {
    const defs = schema[key];
    if (defs === undefined) continue;
    if (!isRecord(defs) || !Object.values(defs).every((c) => strictNode(c, levels))) return false;
  }
  return true;
}
