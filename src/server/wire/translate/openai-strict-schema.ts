/**
 * Whether a JSON schema is one OpenAI's strict structured outputs (`strict: true` on a
 * `json_schema` response format or a function) accept, so that a schema which must hold (as
 * Anthropic's structured outputs and strict tools always do) is enforced on an openai wire too.
 * OpenAI refuses a strict schema outside these rules, where the same schema sent non-strict is
 * answered. A schema whose only gap is optional properties is rewritten to meet them
 * (`openAIStrictSchema`); one that cannot meet them even so goes as the client's style decides.
 *
 * The rules (OpenAI's structured-outputs guide): the root is an object; every object lists all
 * its properties in `required` and sets `additionalProperties: false`; at most ten levels of
 * objects; only the keywords and string formats below.
 */

import { maxJsonDepth } from "../json-depth.js";
import { asArray, isRecord, type JsonObject } from "./shared.js";

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
  if (!isRecord(schema) || schema.type !== "object") return false;
  // The root may name its dialect: the openai SDK's `zodResponseFormat` and the AI SDK send
  // `$schema` with every strict schema, and OpenAI takes it.
  const { $schema, ...rest } = schema;
  return (typeof $schema === "string" || $schema === undefined) && strictNode(rest, 0);
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

/**
 * A strict schema as OpenAI's strict mode takes it. As it is where it meets the rules; where its
 * only gap is properties the client left optional (Anthropic's strict tools and structured
 * outputs take them, as JSON Schema does), with each of them required and its type made nullable,
 * OpenAI's documented way to an optional field (`nullable`: it was rewritten so); undefined where
 * strict mode cannot carry it at all (an object open to other properties, a keyword it does not
 * take). The model then gives null for a property it leaves out, which `dropAddedNulls` takes
 * back out of its answer.
 */
export function openAIStrictSchema(
  schema: unknown,
): { schema: JsonObject; nullable: boolean } | undefined {
  if (!isRecord(schema)) return undefined;
  if (meetsOpenAIStrictRules(schema)) return { schema, nullable: false };
  const rewritten = requiredNullable(schema, schema);
  return meetsOpenAIStrictRules(rewritten) && isRecord(rewritten)
    ? { schema: rewritten, nullable: true }
    : undefined;
}

/**
 * Takes out of `value` (a strict call's arguments or structured output, parsed) the nulls the
 * model gave for properties that `schema`, the client's own, leaves optional and whose own schema
 * takes no null: those `openAIStrictSchema` made nullable. A null the client's schema takes stays,
 * the model's answer. True when any went.
 */
export function dropAddedNulls(value: unknown, schema: unknown): boolean {
  return isRecord(schema) && dropIn(value, schema, schema, 0);
}

/** `node` with the optional properties of each of its objects required and nullable. */
function requiredNullable(node: unknown, root: JsonObject): unknown {
  if (!isRecord(node)) return node;
  const out: JsonObject = { ...node };
  if (isRecord(node.properties)) {
    const required = asArray(node.required);
    const entries = Object.entries(node.properties).map(([name, child]): [string, unknown] => {
      const inner = requiredNullable(child, root);
      return [name, required.includes(name) || acceptsNull(child, root) ? inner : nullable(inner)];
    });
    // A plain object would take a property named `__proto__` as its prototype.
    const properties = Object.fromEntries(entries);
    const names = entries.map(([name]) => name);
    out.properties = properties;
    out.required = [...names, ...required.filter((name) => !names.includes(name as string))];
  }
  if (isRecord(node.items)) out.items = requiredNullable(node.items, root);
  if (Array.isArray(node.anyOf)) out.anyOf = node.anyOf.map((c) => requiredNullable(c, root));
  for (const key of ["$defs", "definitions"]) {
    const defs = node[key];
    if (isRecord(defs))
      out[key] = Object.fromEntries(
        Object.entries(defs).map(([name, def]) => [name, requiredNullable(def, root)]),
      );
  }
  return out;
}

const scalarTypes = new Set(["string", "number", "integer", "boolean"]);

/** `node`, or null: a scalar type gains `null` in its list, anything else an `anyOf` branch. */
function nullable(node: unknown): unknown {
  if (!isRecord(node)) return node;
  const types = Array.isArray(node.type) ? node.type : [node.type];
  const plain = !("enum" in node || "const" in node || "$ref" in node || "anyOf" in node);
  if (plain && types.every((type) => scalarTypes.has(type as string)))
    return { ...node, type: [...types, "null"] };
  const beside = Object.keys(node).every((key) => ["anyOf", "description", "title"].includes(key));
  if (Array.isArray(node.anyOf) && beside)
    return { ...node, anyOf: [...node.anyOf, { type: "null" }] };
  return { anyOf: [node, { type: "null" }] };
}

/** `$ref`s followed one after another before a schema counts as one that resolves to nothing. */
const mostRefHops = 32;

/** The schema a node stands for: itself, or what its `$ref` (within the root) points to. */
function resolved(schema: unknown, root: JsonObject): JsonObject | undefined {
  let node = schema;
  for (let hops = 0; isRecord(node) && typeof node.$ref === "string"; hops++) {
    if (hops === mostRefHops) return undefined;
    node = refTarget(node.$ref, root);
  }
  return isRecord(node) ? node : undefined;
}

function refTarget(ref: string, root: JsonObject): unknown {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let at: unknown = root;
  for (const part of ref.slice(2).split("/")) {
    const key = part.replaceAll("~1", "/").replaceAll("~0", "~");
    if (!isRecord(at) || !Object.hasOwn(at, key)) return undefined;
    at = at[key];
  }
  return at;
}

/** Whether a schema takes null (one without a type or structure takes anything). */
function acceptsNull(schema: unknown, root: JsonObject, depth = 0): boolean {
  if (schema === true) return true;
  const node = resolved(schema, root);
  if (!node || depth > mostRefHops) return false;
  if ("const" in node) return node.const === null;
  if (Array.isArray(node.enum)) return node.enum.includes(null);
  if (Array.isArray(node.anyOf)) return node.anyOf.some((c) => acceptsNull(c, root, depth + 1));
  const { type } = node;
  if (type === undefined) return !isRecord(node.properties) && node.items === undefined;
  return type === "null" || (Array.isArray(type) && type.includes("null"));
}

function dropIn(value: unknown, schema: unknown, root: JsonObject, depth: number): boolean {
  const node = resolved(schema, root);
  if (!node || depth > maxJsonDepth) return false;
  if (Array.isArray(node.anyOf)) {
    // A strict answer has every property of the branch it took, and none other.
    const branch = node.anyOf.find((option) => takes(resolved(option, root), value));
    return branch !== undefined && dropIn(value, branch, root, depth + 1);
  }
  if (Array.isArray(value)) {
    let dropped = false;
    for (const item of value) dropped = dropIn(item, node.items, root, depth + 1) || dropped;
    return dropped;
  }
  if (!isRecord(value) || !isRecord(node.properties)) return false;
  const { properties } = node;
  const required = asArray(node.required);
  let dropped = false;
  for (const key of Object.keys(value)) {
    if (!Object.hasOwn(properties, key)) continue;
    const child = properties[key];
    if (value[key] !== null) dropped = dropIn(value[key], child, root, depth + 1) || dropped;
    else if (!required.includes(key) && !acceptsNull(child, root)) {
      delete value[key];
      dropped = true;
    }
  }
  return dropped;
}

/** Whether an `anyOf` branch is the one a strict answer's array or object took. */
function takes(branch: JsonObject | undefined, value: unknown): boolean {
  if (!branch) return false;
  if (Array.isArray(value)) return branch.items !== undefined;
  if (!isRecord(value) || !isRecord(branch.properties)) return false;
  const names = Object.keys(branch.properties);
  const keys = Object.keys(value);
  return keys.length === names.length && keys.every((key) => names.includes(key));
}
