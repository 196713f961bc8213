import { describe, expect, it } from "vitest";
import { renamedModelText } from "./model-rename.js";

describe("renamedModelText", () => {
  it("renames the one model pair, keeping the text around it byte for byte", () => {
    const raw = '{\n  "id": "x",\n  "model" :\t"up/1",\n  "n": 1\n}';
    expect(renamedModelText(raw, "up/1", "mine")).toBe(
      '{\n  "id": "x",\n  "model" :\t"mine",\n  "n": 1\n}',
    );
  });

  it("leaves a pair quoted inside a string alone", () => {
    const raw = JSON.stringify({ content: '"model": "up"', model: "up" });
    expect(JSON.parse(renamedModelText(raw, "up", "mine") ?? "")).toEqual({
      content: '"model": "up"',
      model: "mine",
    });
  });

  it("declines when the pair is missing, repeated or escaped otherwise than JSON.stringify does", () => {
    expect(renamedModelText('{"id":"x"}', "up", "mine")).toBeUndefined();
    expect(renamedModelText('{"model":"up","a":{"model":"up"}}', "up", "mine")).toBeUndefined();
    expect(renamedModelText('{"model":"up","a":{"model":"x"}}', "up", "mine")).toBeUndefined();
    expect(renamedModelText('{"model":"up\\u002f1"}', "up/1", "mine")).toBeUndefined();
    expect(renamedModelText('{"model":7}', 7, "mine")).toBeUndefined();
  });

  it("passes over a model key whose value is not a string (a tool's schema property)", () => {
    const raw =
      '{"model":"up","tools":[{"parameters":{"properties":{"model":{"type":"string"}}}}]}';
    expect(renamedModelText(raw, "up", "mine")).toBe(raw.replace('"model":"up"', '"model":"mine"'));
  });

  it("escapes the new name as JSON", () => {
    expect(renamedModelText('{"model":"up"}', "up", 'a"b')).toBe('{"model":"a\\"b"}');
  });
});
