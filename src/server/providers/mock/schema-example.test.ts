import { describe, expect, it } from "vitest";
import { exampleOf } from "./schema-example.js";

describe("exampleOf", () => {
  it("follows $refs into $defs and definitions, and allOf wrappers, as pydantic writes them", () => {
    const schema = {
      $defs: {
        City: {
          type: "object",
          properties: { name: { type: "string" }, zip: { type: "string", maxLength: 5 } },
          required: ["name", "zip"],
        },
      },
      definitions: { Unit: { enum: [null, "c", "f"] } },
      type: "object",
      properties: {
        city: { allOf: [{ $ref: "#/$defs/City" }], description: "where" },
        unit: { $ref: "#/definitions/Unit" },
        alias: { type: ["null", "string"] },
      },
      required: ["city", "unit", "alias"],
    };
    expect(exampleOf(schema)).toEqual({
      city: { name: "example name", zip: "examp" },
      unit: "c",
      alias: "example alias",
    });
  });

  it("ends a schema that requires itself, and fills tuples and draft-04 exclusive bounds", () => {
    const node = {
      type: "object",
      properties: { next: { $ref: "#" } },
      required: ["next"],
    };
    let depth = 0;
    for (let at = exampleOf(node) as { next?: unknown }; at?.next; at = at.next as typeof at)
      depth++;
    expect(depth).toBeGreaterThan(0);
    expect(exampleOf({ type: "array", items: [{ type: "integer" }, { type: "boolean" }] })).toEqual(
      [42, true],
    );
    expect(exampleOf({ type: "number", minimum: 0, maximum: 1, exclusiveMaximum: true })).toBe(0.5);
    expect(exampleOf({ type: "integer", exclusiveMinimum: 50 })).toBe(51);
  });

  it("stays bounded whatever sizes the schema asks for", () => {
    const tree = {
      type: "object",
      properties: { left: { $ref: "#" }, right: { $ref: "#" } },
      required: ["left", "right"],
    };
    expect(JSON.stringify(exampleOf(tree)).length).toBeLessThan(100_000);
    const huge = exampleOf({
      type: "array",
      items: { type: "string", minLength: 1e9 },
      minItems: 1e9,
    });
    expect(JSON.stringify(huge).length).toBeLessThan(3_000_000);
  });
});
