import { describe, expect, it } from "vitest";
import { multipartBody } from "../providers/openai/media.js";
import {
  canonicalBody,
  differenceCount,
  firstDifference,
  relativePath,
  requestHash,
  slugOf,
} from "./canonical.js";

const request = (body: unknown) => ({
  provider: "oa",
  method: "POST",
  path: "/chat/completions",
  body,
});

describe("canonical requests", () => {
  it("hash the same whatever the key order, and differently for another body", () => {
    const a = canonicalBody(
      '{"model":"m","messages":[{"role":"user","content":"hi"}]}',
      "application/json",
    );
    const b = canonicalBody(
      '{"messages":[{"content":"hi","role":"user"}],"model":"m"}',
      "application/json",
    );
    expect(requestHash(request(a))).toBe(requestHash(request(b)));
    const c = canonicalBody(
      '{"messages":[{"content":"ho","role":"user"}],"model":"m"}',
      "application/json",
    );
    expect(requestHash(request(c))).not.toBe(requestHash(request(a)));
  });

  it("drop per-user tags that change between runs", () => {
    const body = canonicalBody(
      JSON.stringify({ model: "m", user: "u-1", metadata: { user_id: "session-9", keep: 1 } }),
      "application/json",
    );
    expect(body).toEqual({ metadata: { keep: 1 }, model: "m" });
  });

  it("read a multipart upload as its fields and the file's digest, not its random boundary", () => {
    const file = {
      bytes: Buffer.from("audio bytes"),
      filename: "a.mp3",
      contentType: "audio/mpeg",
    };
    const one = multipartBody({ model: "whisper-1", language: "id" }, [{ field: "file", file }]);
    const two = multipartBody({ model: "whisper-1", language: "id" }, [{ field: "file", file }]);
    expect(one.contentType).not.toBe(two.contentType);
    const canonical = canonicalBody(one.body, one.contentType);
    expect(canonical).toEqual(canonicalBody(two.body, two.contentType));
    expect(canonical).toMatchObject({
      language: "id",
      model: "whisper-1",
      file: { filename: "a.mp3", content_type: "audio/mpeg", bytes: 11 },
    });
  });
});

describe("firstDifference", () => {
  it("names the first differing path in sorted key order, arrays by index", () => {
    const recorded = {
      model: "m",
      messages: [
        { role: "user", content: "a" },
        { role: "user", content: "b" },
      ],
    };
    const now = {
      model: "m",
      messages: [
        { role: "user", content: "a" },
        { role: "user", content: "c" },
      ],
    };
    expect(firstDifference(now, recorded)).toBe("messages[1].content");
    expect(firstDifference({ ...now, tools: [] }, recorded)).toBe("messages[1].content");
    expect(firstDifference({ model: "m", messages: recorded.messages, tools: [] }, recorded)).toBe(
      "tools",
    );
    expect(firstDifference(recorded, recorded)).toBeUndefined();
  });

  it("counts a small edit of a string as nearer than another string", () => {
    expect(differenceCount({ c: "hello here" }, { c: "hello there" })).toBeLessThan(
      differenceCount({ c: "hello here" }, { c: "answer in responses" }),
    );
  });
});

describe("names", () => {
  it("slug the provider, the model and the first words of the last user message", () => {
    const body = {
      model: "gpt-4o-mini",
      messages: [
        { role: "user", content: "first" },
        { role: "assistant", content: "x" },
        {
          role: "user",
          content: [{ type: "text", text: "What's the weather in Jakarta today, please?" }],
        },
      ],
    };
    expect(slugOf(request(body))).toBe("oa-gpt-4o-mini-what-s-the-weather-in-jakarta-today");
  });

  it("take the path under the provider's base URL", () => {
    expect(relativePath("/v1/chat/completions", "https://api.example.com/v1/")).toBe(
      "/chat/completions",
    );
    expect(relativePath("/messages", "https://api.example.com")).toBe("/messages");
  });
});
