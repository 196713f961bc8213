import { transformJSONSchema } from "@anthropic-ai/sdk/lib/transform-json-schema";
import { describe, expect, it } from "vitest";
import { toAnthropicSchema } from "./anthropic-schema.js";

/** What the OpenAI Agents SDK sends for an output type with integer bounds and a pattern. */
const agentsSchema = {
  $schema: "http://json-schema.org/draft-07/schema#",
  type: "object",
  properties: {
    city: { type: "string", minLength: 2, maxLength: 40, pattern: "^[A-Z]" },
    score: { type: "integer", minimum: 1, maximum: 10, description: "How good." },
    ratio: { type: "number", exclusiveMinimum: 0, multipleOf: 0.5 },
    tags: {
      type: "array",
      items: { type: "string", format: "hostname" },
      minItems: 2,
      maxItems: 5,
    },
    when: { type: "string", format: "date-time" },
    code: { type: "string", format: "iso-3166" },
    kind: { type: "string", enum: ["a", "b"] },
    note: { anyOf: [{ type: "string", maxLength: 10 }, { type: "null" }] },
    pick: { oneOf: [{ $ref: "#/$defs/Item" }, { const: 3 }] },
  },
  required: ["city", "score", "ratio", "tags", "when", "code", "kind", "note", "pick"],
  additionalProperties: true,
  $defs: {
    Item: {
      type: "object",
      title: "Item",
      properties: { n: { type: "integer", minimum: 0 } },
      required: ["n"],
    },
  },
};

describe("toAnthropicSchema", () => {
  it("transforms a schema exactly as the Anthropic SDK 1.14's transformJSONSchema does", () => {
    const schemas = [
      agentsSchema,
      { type: "object" },
      { type: "array", items: { type: "object", properties: {} }, minItems: 1 },
      { allOf: [{ type: "object", properties: { a: { type: "string" } } }] },
      { $ref: "#/$defs/A", $defs: { A: { type: "integer", maximum: 3 } } },
    ];
    for (const schema of schemas) {
      expect(toAnthropicSchema(schema)).toEqual(transformJSONSchema(schema));
    }
  });

  it("moves the constraints Anthropic refuses into descriptions and closes every object", () => {
    const out = toAnthropicSchema(agentsSchema) as {
      additionalProperties: unknown;
      properties: Record<string, Record<string, unknown>>;
    };
    expect(out.additionalProperties).toBe(false);
    expect(out.properties.score).toEqual({
      type: "integer",
      description: "How good.\n\n{minimum: 1, maximum: 10}",
    });
    expect(out.properties.tags).toEqual({
      type: "array",
      items: { type: "string", format: "hostname" },
      description: "{maxItems: 5, minItems: 2}",
    });
    expect(JSON.stringify(out)).not.toMatch(/"(minimum|maximum|minLength|pattern)":/);
  });

  it("leaves the client's schema untouched", () => {
    const before = JSON.stringify(agentsSchema);
    toAnthropicSchema(agentsSchema);
    expect(JSON.stringify(agentsSchema)).toBe(before);
  });

  it("transforms a node the SDK would refuse (no type) and draft-07 definitions, without throwing", () => {
    expect(toAnthropicSchema({ description: "anything", minimum: 1 })).toEqual({
      description: "anything\n\n{minimum: 1}",
    });
    expect(
      toAnthropicSchema({
        type: "object",
        properties: { a: { $ref: "#/definitions/A" } },
        definitions: { A: { type: "string", maxLength: 3 } },
      }),
    ).toEqual({
      type: "object",
      properties: { a: { $ref: "#/definitions/A" } },
      additionalProperties: false,
      definitions: { A: { type: "string", description: "{maxLength: 3}" } },
    });
  });
});
