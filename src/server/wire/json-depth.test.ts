import { describe, expect, it } from "vitest";
import { jsonShape, nestedDeeperThan } from "./json-depth.js";

const arrays = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`;

describe("nestedDeeperThan", () => {
  it("counts objects and arrays, at the bound and past it", () => {
    expect(nestedDeeperThan(arrays(8), 8)).toBe(false);
    expect(nestedDeeperThan(arrays(9), 8)).toBe(true);
    expect(nestedDeeperThan(`${'{"a":'.repeat(9)}1${"}".repeat(9)}`, 8)).toBe(true);
    // Siblings are not depth: many openers, shallow nesting.
    expect(nestedDeeperThan(JSON.stringify(Array.from({ length: 50 }, () => [[1]])), 8)).toBe(
      false,
    );
  });

  it("ignores brackets inside strings, escaped quotes included", () => {
    expect(nestedDeeperThan(JSON.stringify({ a: "[".repeat(50) }), 8)).toBe(false);
    expect(nestedDeeperThan(JSON.stringify({ a: `\\"${"{".repeat(50)}` }), 8)).toBe(false);
    expect(nestedDeeperThan(`{"k\\\\":${arrays(9)}}`, 9)).toBe(true);
  });
});

describe("jsonShape", () => {
  it("counts the top level's keys as written, a repeated one twice, and nothing nested or quoted", () => {
    expect(jsonShape('{"a":1,"b":{"c":2,"d":[{"e":3}]},"f":"g:\\"h\\":"}', 128).topLevelKeys).toBe(
      3,
    );
    expect(jsonShape('{ "max_tokens" : 5 , "max_tokens":100 }', 128).topLevelKeys).toBe(2);
    expect(jsonShape('{"a":"x\\\\","b":1}', 128).topLevelKeys).toBe(2);
    expect(jsonShape('{"model":"a","b":{"model":"c"},"model":"d"}', 128)).toEqual({
      tooDeep: false,
      topLevelKeys: 3,
      model: [39, 42],
      referenceKey: false,
    });
  });

  it("tells a key naming input by reference (url, image_url, file_url, file_id) at any depth, not a value", () => {
    const has = (text: string) => jsonShape(text, 128).referenceKey;
    expect(has('{"messages":[{"content":[{"image_url":{"url" : "https://x"}}]}]}')).toBe(true);
    expect(has('{"input":[{"type":"input_file","file_id":"file-1"}]}')).toBe(true);
    expect(has('{"input":[{"type":"input_file","file_url":"https://x"}]}')).toBe(true);
    expect(has('{"input":[{"type":"input_image","image_url":"https://x"}]}')).toBe(true);
    expect(has('{"messages":[{"content":"url"},{"content":"file_id"}],"u":"\\"url\\":"}')).toBe(
      false,
    );
    expect(has('{"urls":1,"the_url":2,"file_ids":3}')).toBe(false);
  });
});
