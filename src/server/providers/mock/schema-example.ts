import { isRecord, type JsonObject } from "../../wire/translate/shared.js";

/**
 * A value that a JSON schema accepts, for the mock's tool-call arguments and structured outputs.
 * A real model in strict mode answers what the schema promises, and client libraries check it
 * (the Agents SDK and the AI SDK parse tool arguments and outputs with the zod schema the
 * schema came from), so a value that is only the right shape at the top level fails the client's
 * own code under test. Followed: `$ref` into `$defs`/`definitions`, `allOf`, `anyOf`/`oneOf`
 * (their first option that is not null), `const`, `enum`, type lists, nested objects and arrays
 * (`minItems`, tuples), string formats and lengths, number bounds and `multipleOf`. A `pattern`
 * other than a format's is not followed.
 *
 * Strings read `example <property>`, numbers 42 and booleans true where nothing constrains them,
 * so an answer can be predicted from the schema alone.
 */
export function exampleOf(schema: unknown): unknown {
  const root = isRecord(schema) ? schema : {};
  return new Example(root).value(root, "value", 0);
}

/** Formatted strings a validator of the format (and zod's pattern for it) accepts. */
const formatted: Record<string, string> = {
  "date-time": "2030-01-01T00:00:00Z",
  date: "2030-01-01",
  time: "12:00:00",
  duration: "P1D",
  email: "user@example.com",
  "idn-email": "user@example.com",
  hostname: "example.com",
  "idn-hostname": "example.com",
  ipv4: "192.0.2.1",
  ipv6: "2001:db8::1",
  uri: "https://example.com/",
  "uri-reference": "https://example.com/",
  iri: "https://example.com/",
  url: "https://example.com/",
  uuid: "00000000-0000-4000-8000-000000000000",
  guid: "00000000-0000-4000-8000-000000000000",
};

/** Nesting past this (a schema that refers to itself through required fields) ends in `null`. */
const maxDepth = 32;
/**
 * Bounds on what one answer makes, whatever the schema asks (`minItems: 1e9`, a tree whose every
 * node requires two children): past them the answer is cut short rather than the gateway's memory.
 */
const maxValues = 2_000;
const maxStringLength = 1_024;

class Example {
  private valuesLeft = maxValues;

  constructor(private readonly root: JsonObject) {}

  value(schema: unknown, key: string, depth: number): unknown {
    if (depth > maxDepth || this.valuesLeft <= 0) return null;
    this.valuesLeft--;
    if (!isRecord(schema)) return `example ${key}`;
    const node = this.resolved(schema);
    if ("const" in node) return node.const;
    if (Array.isArray(node.enum) && node.enum.length > 0)
      return node.enum.find((v) => v !== null) ?? node.enum[0];
    const options = Array.isArray(node.anyOf) ? node.anyOf : node.oneOf;
    if (Array.isArray(options) && options.length > 0) {
      const option = options.find((o) => !isNullSchema(this.resolved(o))) ?? options[0];
      return this.value(this.merged(node, option), key, depth + 1);
    }
    if (Array.isArray(node.allOf) && node.allOf.length > 0) {
      const { allOf, ...rest } = node;
      return this.value(
        (allOf as unknown[]).reduce<JsonObject>((all, part) => this.merged(all, part), rest),
        key,
        depth + 1,
      );
    }
    switch (typeOf(node)) {
      case "object":
        return this.object(node, depth);
      case "array":
        return this.array(node, key, depth);
      case "number":
        return numberIn(node, false);
      case "integer":
        return numberIn(node, true);
      case "boolean":
        return true;
      case "null":
        return null;
      default:
        return stringIn(node, key);
    }
  }

  private object(node: JsonObject, depth: number): JsonObject {
    const properties = isRecord(node.properties) ? node.properties : {};
    const required = Array.isArray(node.required) ? node.required : undefined;
    const out: JsonObject = {};
    for (const [name, property] of Object.entries(properties)) {
      if (required && !required.includes(name)) continue;
      out[name] = this.value(property, name, depth + 1);
    }
    return out;
  }

  private array(node: JsonObject, key: string, depth: number): unknown[] {
    // A tuple: `prefixItems` (2020-12) or an `items` list (draft-07).
    const tuple = Array.isArray(node.prefixItems)
      ? node.prefixItems
      : Array.isArray(node.items)
        ? node.items
        : undefined;
    const length = Math.min(Math.max(tuple?.length ?? 0, count(node.minItems)), this.valuesLeft);
    const rest = tuple ? (node.additionalItems ?? node.items) : node.items;
    return Array.from({ length }, (_, i) => {
      const item = tuple && i < tuple.length ? tuple[i] : rest;
      const value = this.value(Array.isArray(item) ? {} : item, `${key} ${i + 1}`, depth + 1);
      // Strings differ by their number; numbers are made to, where items must be unique.
      return node.uniqueItems === true && typeof value === "number" ? value + i : value;
    });
  }

  /** The schema a `$ref` points to, with the referring node's own keywords over it. */
  private resolved(schema: unknown): JsonObject {
    if (!isRecord(schema)) return {};
    let node = schema;
    for (let hops = 0; typeof node.$ref === "string" && hops < maxDepth; hops++) {
      const { $ref, ...rest } = node;
      node = { ...this.target($ref as string), ...rest };
    }
    return node;
  }

  private target(ref: string): JsonObject {
    if (ref === "#") return this.root;
    let at: unknown = this.root;
    for (const part of ref.replace(/^#\//, "").split("/")) {
      if (!isRecord(at)) return {};
      at = at[part.replaceAll("~1", "/").replaceAll("~0", "~")];
    }
    return isRecord(at) ? at : {};
  }

  /** `option` with what its parent says beside `anyOf`/`allOf` (a description, a type). */
  private merged(parent: JsonObject, option: unknown): JsonObject {
    const { anyOf: _a, oneOf: _o, allOf: _l, ...rest } = parent;
    const inner = this.resolved(option);
    const properties =
      isRecord(rest.properties) || isRecord(inner.properties)
        ? { ...(rest.properties as JsonObject), ...(inner.properties as JsonObject) }
        : undefined;
    const required = [
      ...(Array.isArray(rest.required) ? rest.required : []),
      ...(Array.isArray(inner.required) ? inner.required : []),
    ];
    return {
      ...rest,
      ...inner,
      ...(properties ? { properties } : {}),
      ...(required.length > 0 ? { required } : {}),
    };
  }
}

function isNullSchema(node: JsonObject): boolean {
  return node.type === "null" || (Array.isArray(node.enum) && node.enum.every((v) => v === null));
}

/** The node's type; of a list, the first that is not null; else what its keywords imply. */
function typeOf(node: JsonObject): string | undefined {
  const type = Array.isArray(node.type)
    ? (node.type.find((t) => t !== "null") ?? node.type[0])
    : node.type;
  if (typeof type === "string") return type;
  if (isRecord(node.properties) || isRecord(node.additionalProperties)) return "object";
  if ("items" in node || "prefixItems" in node) return "array";
  return undefined;
}

function count(value: unknown): number {
  return typeof value === "number" && Number.isInteger(value) && value > 0 ? value : 0;
}

function stringIn(node: JsonObject, key: string): string {
  const format = typeof node.format === "string" ? formatted[node.format] : undefined;
  let text = format ?? `example ${key}`;
  const min = Math.min(count(node.minLength), maxStringLength);
  if (text.length < min) text = text.padEnd(min, format ? "0" : " x").slice(0, min);
  const max = typeof node.maxLength === "number" ? Math.max(0, node.maxLength) : undefined;
  if (max !== undefined && text.length > max) text = text.slice(0, max);
  return text;
}

/** 42, or the value nearest it inside the node's bounds and on its `multipleOf`. */
function numberIn(node: JsonObject, integer: boolean): number {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  // Draft-04 wrote exclusive bounds as booleans beside `minimum`/`maximum`.
  const lowExclusive =
    num(node.exclusiveMinimum) ?? (node.exclusiveMinimum === true ? num(node.minimum) : undefined);
  const highExclusive =
    num(node.exclusiveMaximum) ?? (node.exclusiveMaximum === true ? num(node.maximum) : undefined);
  const low = lowExclusive ?? num(node.minimum);
  const high = highExclusive ?? num(node.maximum);
  const step = num(node.multipleOf) ?? (integer ? 1 : undefined);
  const fits = (v: number) =>
    (low === undefined || (lowExclusive !== undefined ? v > low : v >= low)) &&
    (high === undefined || (highExclusive !== undefined ? v < high : v <= high)) &&
    (step === undefined || Number.isInteger(v / step));
  const onStep = (v: number, round: (x: number) => number) =>
    step === undefined ? v : round(v / step) * step;
  const candidates = [
    42,
    onStep(42, Math.ceil),
    onStep(42, Math.floor),
    low === undefined ? undefined : onStep(low, Math.ceil),
    low === undefined ? undefined : onStep(low, Math.ceil) + (step ?? 1),
    high === undefined ? undefined : onStep(high, Math.floor),
    high === undefined ? undefined : onStep(high, Math.floor) - (step ?? 1),
    low !== undefined && high !== undefined ? onStep((low + high) / 2, Math.round) : undefined,
  ];
  const fitting = candidates.filter((v): v is number => v !== undefined && fits(v));
  // The one nearest 42, so that a bound far away (a safe-integer minimum) is not the answer.
  if (fitting.length > 0)
    return fitting.reduce((best, v) => (Math.abs(v - 42) < Math.abs(best - 42) ? v : best));
  return low !== undefined && high !== undefined ? (low + high) / 2 : (low ?? high ?? 42);
}
