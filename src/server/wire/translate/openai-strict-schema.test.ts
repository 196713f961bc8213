import { zodOutputFormat } from "@anthropic-ai/sdk/helpers/zod";
import { describe, expect, it } from "vitest";
import * as z from "zod/v4";
import { meetsOpenAIStrictRules } from "./openai-strict-schema.js";

const closed = (properties: Record<string, unknown>) => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
});

describe("meetsOpenAIStrictRules", () => {
  it("holds for the Anthropic SDK's zodOutputFormat of an object whose fields are all required", () => {
    const format = zodOutputFormat(
      z.object({ city: z.string(), tags: z.array(z.string()), kind: z.enum(["a", "b"]) }),
    );
    expect(meetsOpenAIStrictRules(format.schema)).toBe(true);
  });

  it("fails for an optional field, an open object, a keyword or format strict mode refuses, or a root that is no object", () => {
    const optional = zodOutputFormat(z.object({ city: z.string(), note: z.string().optional() }));
    expect(meetsOpenAIStrictRules(optional.schema)).toBe(false);
    expect(meetsOpenAIStrictRules({ type: "object", properties: {}, required: [] })).toBe(false);
    expect(meetsOpenAIStrictRules(closed({ name: { type: "string", minLength: 1 } }))).toBe(false);
    expect(meetsOpenAIStrictRules(closed({ site: { type: "string", format: "uri" } }))).toBe(false);
    expect(meetsOpenAIStrictRules({ type: "array", items: { type: "string" } })).toBe(false);
  });

  it("looks into nested objects, array items, anyOf branches and $defs", () => {
    const open = { type: "object", properties: { a: { type: "string" } } };
    for (const inner of [
      closed({ nested: open }),
      closed({ list: { type: "array", items: open } }),
      closed({ either: { anyOf: [{ type: "null" }, open] } }),
      { ...closed({ ref: { $ref: "#/$defs/open" } }), $defs: { open } },
    ])
      expect(meetsOpenAIStrictRules(inner)).toBe(false);
    const closedInner = closed({ a: { type: "string" } });
    expect(
      meetsOpenAIStrictRules({
        ...closed({ list: { type: "array", items: closedInner }, ref: { $ref: "#/$defs/c" } }),
        $defs: { c: closedInner },
      }),
    ).toBe(true);
  });

  it("fails past ten levels of objects", () => {
    let schema: Record<string, unknown> = closed({ leaf: { type: "string" } });
    for (let level = 1; level < 10; level++) schema = closed({ inner: schema });
    expect(meetsOpenAIStrictRules(schema)).toBe(true);
    expect(meetsOpenAIStrictRules(closed({ inner: schema }))).toBe(false);
  });
});
