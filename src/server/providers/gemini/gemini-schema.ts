/**
 * A client's JSON schema (tool parameters, `response_format`) as Gemini's JSON-schema fields
 * (`parametersJsonSchema`, `responseJsonSchema`) take it. Google documents the keywords those
 * fields support (below); a node keeps them, and any other constraint a client sends (`pattern`,
 * `minLength`, `multipleOf` ...) is written into its `description` for the model to read, as
 * `wire/translate/anthropic-schema.ts` does for Anthropic. Draft-07 `definitions` become `$defs`
 * (the `$ref`s that point into them follow), a string or number `const` a one-value `enum`, and a
 * `$ref` node keeps only `$` keywords, since Google refuses anything beside a `$ref`.
 */

import { isRecord, type JsonObject } from "../../wire/translate/shared.js";

/** What Google lists as supported in `responseJsonSchema` and `parametersJsonSchema`. */
export const geminiSchemaKeywords = new Set([
  "$id",
  "$defs",
  "$ref",
  "$anchor",
  "type",
  "format",
  "title",
  "description",
  "enum",
  "items",
  "prefixItems",
  "minItems",
  "maxItems",
  "minimum",
  "maximum",
  "anyOf",
  "oneOf",
  "properties",
  "additionalProperties",
  "required",
  "propertyOrdering",
]);

/** Keywords that say nothing about the value, left out rather than described. */
const silent = new Set(["$schema", "$comment", "strict"]);

export function toGeminiSchema(schema: JsonObject): JsonObject {
  return transformNode({ ...schema });
}

function transformValue(value: unknown): unknown {
  return isRecord(value) ? transformNode({ ...value }) : value;
}

const isEnumValue = (value: unknown) => typeof value === "string" || typeof value === "number";

function transformNode(rest: JsonObject): JsonObject {
  const out: JsonObject = {};
  const take = (key: string): unknown => {
    const value = rest[key];
    delete rest[key];
    return value;
  };
  const defs = { ...(isRecord(rest.definitions) ? rest.definitions : {}) };
  if (isRecord(rest.$defs)) Object.assign(defs, rest.$defs);
  const hadDefs = [take("definitions"), take("$defs")].some((defs) => defs !== undefined);
  if (hadDefs) {
    out.$defs = Object.fromEntries(
      Object.entries(defs).map(([name, def]) => [name, transformValue(def)]),
    );
  }
  for (const key of ["$id", "$anchor"]) if (rest[key] !== undefined) out[key] = take(key);
  const ref = take("$ref");
  if (typeof ref === "string") {
    out.$ref = ref.replace(/^#\/definitions\//, "#/$defs/");
    return out;
  }

  // A single `allOf` (how pydantic wraps a described `$ref`) is that schema; more are described.
  const allOf = rest.allOf;
  if (Array.isArray(allOf) && allOf.length === 1 && isRecord(allOf[0])) {
    take("allOf");
    const inner = transformNode({ ...allOf[0] });
    if (inner.$ref !== undefined) return { ...out, ...inner };
    Object.assign(rest, { ...inner, ...rest });
  }

  const constant = take("const");
  if (isEnumValue(constant)) out.enum = [constant];
  else if (constant !== undefined) rest.const = constant;
  const values = rest.enum;
  if (Array.isArray(values) && values.length > 0 && values.every(isEnumValue)) {
    take("enum");
    if (!out.enum) out.enum = values;
  }

  for (const key of ["type", "format", "title", "description", "required", "propertyOrdering"])
    if (rest[key] !== undefined) out[key] = take(key);
  for (const key of ["minItems", "maxItems", "minimum", "maximum"])
    if (typeof rest[key] === "number") out[key] = take(key);

  const properties = take("properties");
  if (isRecord(properties)) {
    out.properties = Object.fromEntries(
      Object.entries(properties).map(([key, value]) => [key, transformValue(value)]),
    );
  }
  const additional = take("additionalProperties");
  if (additional !== undefined) out.additionalProperties = transformValue(additional);
  const items = take("items");
  if (Array.isArray(items)) out.prefixItems = items.map(transformValue);
  else if (items !== undefined) out.items = transformValue(items);
  const prefixItems = take("prefixItems");
  if (Array.isArray(prefixItems)) out.prefixItems = prefixItems.map(transformValue);
  for (const key of ["anyOf", "oneOf"]) {
    const options = take(key);
    if (Array.isArray(options)) out[key] = options.map(transformValue);
  }

  const leftover = Object.entries(rest).filter(([key]) => !silent.has(key));
  if (leftover.length > 0) {
    const existing = typeof out.description === "string" ? out.description : "";
    out.description = `${existing ? `${existing}\n\n` : ""}{${leftover
      .map(([key, value]) => `${key}: ${JSON.stringify(value)}`)
      .join(", ")}}`;
  }
  return out;
}
