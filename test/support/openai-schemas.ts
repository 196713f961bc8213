import { readFileSync } from "node:fs";
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";

/**
 * OpenAI's published schemas (test/fixtures/openai-openapi, extracted from the OpenAPI document by
 * scripts/openai-openapi-extract.mjs) as JSON Schema validators for what the gateway answers.
 *
 * The document is OpenAPI 3.1, so its schemas are JSON Schema 2020-12, with a few 3.0 leftovers
 * a 2020-12 validator would misread; `adjust` turns each into its 2020-12 meaning and changes
 * nothing else (docs/conformance.md lists them).
 */

interface Fixture {
  source: { repository: string; commit: string; version: string };
  components: { schemas: Record<string, unknown> };
}

const fixture = JSON.parse(
  readFileSync(new URL("../fixtures/openai-openapi/schemas.json", import.meta.url), "utf8"),
) as Fixture;

/** The document's version and commit, for test names and messages. */
export const openapiSource = fixture.source;

const schemas = fixture.components.schemas;
const documentId = "https://openai.test/openapi.json";
const ref = (name: string) => `${documentId}#/components/schemas/${name}`;

type Json = Record<string, unknown>;

/**
 * - `nullable: true` (OpenAPI 3.0) allows null: 2020-12 ignores the keyword, so it becomes
 *   `null` in `type` (and `enum`), or an `anyOf` with null where the schema has no `type`.
 * - `$recursiveRef: "#"` (2019-09) under `$recursiveAnchor` means the schema that holds the
 *   anchor; in one document of components that is a `$ref` to that component.
 * - `discriminator` is an annotation: the `anyOf`/`oneOf` beside it decides. Stream events are
 *   dispatched on their `type` by `eventSchema` instead, which gives errors of one branch.
 */
function adjust(schema: unknown, component: string): unknown {
  if (Array.isArray(schema)) return schema.map((item) => adjust(item, component));
  if (!schema || typeof schema !== "object") return schema;
  const out: Json = {};
  for (const [key, value] of Object.entries(schema as Json)) {
    if (key === "nullable" || key === "discriminator" || key === "$recursiveAnchor") continue;
    if (key === "$recursiveRef") out.$ref = ref(component);
    else if (key === "properties")
      out.properties = Object.fromEntries(
        Object.entries(value as Json).map(([name, inner]) => [name, adjust(inner, component)]),
      );
    else if (key === "enum" || key === "const" || key === "default" || key === "required")
      out[key] = value;
    else out[key] = adjust(value, component);
  }
  if ((schema as Json).nullable !== true) return out;
  if (typeof out.type === "string") out.type = [out.type, "null"];
  else if (Array.isArray(out.type)) out.type = [...out.type, "null"];
  else return { anyOf: [out, { type: "null" }] };
  if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  return out;
}

const ajv = new Ajv2020({
  strict: false,
  allErrors: true,
  // The document's formats (unixtime, double, binary) are descriptions, not checks.
  validateFormats: false,
  logger: false,
});
ajv.addSchema({
  $id: documentId,
  components: {
    schemas: Object.fromEntries(
      Object.entries(schemas).map(([name, schema]) => [name, adjust(schema, name)]),
    ),
  },
});

const compiled = new Map<string, ValidateFunction>();
function validator(name: string): ValidateFunction {
  let validate = compiled.get(name);
  if (!validate) {
    if (!(name in schemas)) throw new Error(`OpenAI's document has no schema ${name}`);
    const found = ajv.getSchema(ref(name));
    if (!found) throw new Error(`schema ${name} did not compile`);
    validate = found;
    compiled.set(name, validate);
  }
  return validate;
}

/** The `type` values of each branch of a union of events, to its component's name. */
function branchesByType(union: string): Map<string, string> {
  const byType = new Map<string, string>();
  const branches = (schemas[union] as Json).anyOf ?? (schemas[union] as Json).oneOf;
  for (const branch of branches as Json[]) {
    const name = String(branch.$ref).split("/").at(-1) ?? "";
    const type = ((schemas[name] as Json).properties as Json | undefined)?.type as Json | undefined;
    for (const value of (type?.enum as string[] | undefined) ?? []) byType.set(value, name);
  }
  return byType;
}

const responseEvents = branchesByType("ResponseStreamEvent");

/** The schema of a Responses stream event, by its `type`: undefined for a type OpenAI has not. */
export function responseEventSchema(type: string): string | undefined {
  return responseEvents.get(type);
}

function describe(errors: ErrorObject[]): string {
  const lines = errors
    .slice(0, 12)
    .map(
      (e) =>
        `  ${e.instancePath || "(root)"} ${e.message}${e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : ""}`,
    );
  if (errors.length > 12) lines.push(`  ... ${errors.length - 12} more`);
  return lines.join("\n");
}

/** Mismatches of `value` with OpenAI's schema `name`, each with its path; empty when it conforms. */
export function mismatches(name: string, value: unknown): string[] {
  const validate = validator(name);
  if (validate(value)) return [];
  return (validate.errors ?? []).map(
    (e) => `${e.instancePath || "(root)"} ${e.message} ${JSON.stringify(e.params)}`,
  );
}

/** Throws, naming `what`, the schema and every mismatching path, unless `value` conforms. */
export function assertConforms(name: string, value: unknown, what: string): void {
  const validate = validator(name);
  if (validate(value)) return;
  throw new Error(
    `${what} does not conform to ${name} (OpenAI API ${openapiSource.version}):\n` +
      `${describe(validate.errors ?? [])}\n  value: ${JSON.stringify(value).slice(0, 1500)}`,
  );
}

/** A Responses stream event against its own event schema (chosen by `type`). */
export function assertResponseEvent(event: { type?: unknown }, what: string): void {
  const name = typeof event.type === "string" ? responseEventSchema(event.type) : undefined;
  if (!name) {
    throw new Error(
      `${what}: event type ${JSON.stringify(event.type)} is not one of OpenAI's Responses stream events`,
    );
  }
  assertConforms(name, event, `${what} (${String(event.type)})`);
}
