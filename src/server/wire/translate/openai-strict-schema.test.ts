import { zodOutputFormat } from "@anthropic-ai/sdk/helpers/zod";
import { describe, expect, it } from "vitest";
import * as z from "zod/v4";
import {
  dropAddedNulls,
  meetsOpenAIStrictRules,
  openAIStrictSchema,
} from "./openai-strict-schema.js";

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

  it("takes the root's `$schema` (the openai SDK's zodResponseFormat and the AI SDK send it), and rewrites around it", () => {
    const dialect = "http://json-schema.org/draft-07/schema#";
    expect(meetsOpenAIStrictRules({ $schema: dialect, ...closed({ a: { type: "string" } }) })).toBe(
      true,
    );
    const optional = { $schema: dialect, ...closed({ a: { type: "string" } }), required: [] };
    expect(openAIStrictSchema(optional)).toEqual({
      schema: { ...optional, properties: { a: { type: ["string", "null"] } }, required: ["a"] },
      nullable: true,
    });
    expect(meetsOpenAIStrictRules({ $schema: 7, ...closed({}) })).toBe(false);
  });

  it("fails past ten levels of objects", () => {
    let schema: Record<string, unknown> = closed({ leaf: { type: "string" } });
    for (let level = 1; level < 10; level++) schema = closed({ inner: schema });
    expect(meetsOpenAIStrictRules(schema)).toBe(true);
    expect(meetsOpenAIStrictRules(closed({ inner: schema }))).toBe(false);
  });
});

describe("openAIStrictSchema and dropAddedNulls", () => {
  it("fits the Anthropic SDK's zodOutputFormat of an object with optional fields, nested ones too", () => {
    const format = zodOutputFormat(
      z.object({
        city: z.string(),
        note: z.string().optional(),
        near: z.object({ name: z.string(), km: z.number().optional() }).optional(),
      }),
    );
    const fit = openAIStrictSchema(format.schema);
    expect(fit?.nullable).toBe(true);
    expect(meetsOpenAIStrictRules(fit?.schema)).toBe(true);
    const answer = { city: "Jakarta", note: null, near: { name: "Bogor", km: null } };
    expect(dropAddedNulls(answer, format.schema)).toBe(true);
    expect(answer).toEqual({ city: "Jakarta", near: { name: "Bogor" } });
  });

  it("leaves a schema that meets the rules as it is", () => {
    const schema = closed({ a: { type: "string" } });
    expect(openAIStrictSchema(schema)).toEqual({ schema, nullable: false });
  });

  it("makes optional properties required and nullable, in $defs and anyOf branches too, and a property that takes null already only required", () => {
    const branch = {
      type: "object",
      properties: { x: { type: "integer" }, y: { $ref: "#/$defs/point" } },
      required: ["x"],
      additionalProperties: false,
    };
    const schema = {
      type: "object",
      properties: {
        pick: { anyOf: [branch, { type: "string" }] },
        maybe: { type: ["string", "null"] },
        at: { $ref: "#/$defs/point" },
      },
      required: [],
      additionalProperties: false,
      $defs: {
        point: {
          type: "object",
          properties: { lat: { type: "number" }, label: { const: "here" } },
          required: ["lat"],
          additionalProperties: false,
        },
      },
    };
    const fit = openAIStrictSchema(schema);
    expect(fit?.nullable).toBe(true);
    expect(meetsOpenAIStrictRules(fit?.schema)).toBe(true);
    expect(fit?.schema.properties).toEqual({
      pick: {
        anyOf: [
          {
            ...branch,
            properties: {
              x: { type: "integer" },
              y: { anyOf: [{ $ref: "#/$defs/point" }, { type: "null" }] },
            },
            required: ["x", "y"],
          },
          { type: "string" },
          { type: "null" },
        ],
      },
      maybe: { type: ["string", "null"] },
      at: { anyOf: [{ $ref: "#/$defs/point" }, { type: "null" }] },
    });
    expect(fit?.schema.$defs).toEqual({
      point: {
        type: "object",
        properties: {
          lat: { type: "number" },
          label: { anyOf: [{ const: "here" }, { type: "null" }] },
        },
        required: ["lat", "label"],
        additionalProperties: false,
      },
    });

    // Back: the nulls of properties the client left optional go, through the branch the answer took.
    const answer = {
      pick: { x: 1, y: { lat: 2, label: null } },
      maybe: null,
      at: null,
    };
    expect(dropAddedNulls(answer, schema)).toBe(true);
    expect(answer).toEqual({ pick: { x: 1, y: { lat: 2 } }, maybe: null });
    const plain = { pick: "text", maybe: "m", at: { lat: 1, label: "here" } };
    expect(dropAddedNulls(plain, schema)).toBe(false);
  });

  it("is undefined for a schema strict mode cannot carry even so, and keeps a property named __proto__", () => {
    expect(openAIStrictSchema({ type: "object", properties: { a: { type: "string" } } })).toBe(
      undefined,
    );
    expect(openAIStrictSchema(closed({ a: { type: "string", minLength: 1 } }))).toBe(undefined);
    const schema = JSON.parse(
      '{"type":"object","properties":{"__proto__":{"type":"string"}},"required":[],"additionalProperties":false}',
    );
    const fit = openAIStrictSchema(schema);
    expect(Object.keys(fit?.schema.properties ?? {})).toEqual(["__proto__"]);
    expect(fit?.schema.required).toEqual(["__proto__"]);
    const answer = JSON.parse('{"__proto__":null}');
    expect(dropAddedNulls(answer, schema)).toBe(true);
    expect(Object.keys(answer)).toEqual([]);
  });
});
