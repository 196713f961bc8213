import { describe, expect, it } from "vitest";
import type { ChatCompletionRequest } from "../../wire/openai-types.js";
import { UnsupportedRequest } from "../../wire/upstream-failure.js";
import { chatToGemini, unsignedCallSignature } from "./gemini-request.js";
import { toGeminiSchema } from "./gemini-schema.js";
import { callIdFor, signatureOfCallId } from "./tool-call-ids.js";

const chat = (extra: Partial<ChatCompletionRequest>): ChatCompletionRequest => ({
  model: "gemini-2.5-flash",
  messages: [{ role: "user", content: "hi" }],
  ...extra,
});

describe("chatToGemini: messages", () => {
  it("puts system and developer text in systemInstruction and the turns in user/model contents", () => {
    const out = chatToGemini(
      chat({
        messages: [
          { role: "system", content: "Be brief." },
          { role: "developer", content: [{ type: "text", text: "Answer in French." }] },
          { role: "user", content: "Hello" },
          { role: "assistant", content: "Bonjour" },
          { role: "user", content: [{ type: "text", text: "Again" }] },
        ],
      }),
      1000,
    );
    expect(out.systemInstruction).toEqual({
      parts: [{ text: "Be brief." }, { text: "Answer in French." }],
    });
    expect(out.contents).toEqual([
      { role: "user", parts: [{ text: "Hello" }] },
      { role: "model", parts: [{ text: "Bonjour" }] },
      { role: "user", parts: [{ text: "Again" }] },
    ]);
  });

  it("sends base64 data-URL images inline and other URLs as fileData", () => {
    const out = chatToGemini(
      chat({
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "What is this?" },
              { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
              { type: "image_url", image_url: { url: "https://example.com/cat.webp?x=1" } },
            ],
          },
        ],
      }),
      1000,
    );
    expect(out.contents[0].parts).toEqual([
      { text: "What is this?" },
      { inlineData: { mimeType: "image/png", data: "iVBORw0KGgo=" } },
      { fileData: { fileUri: "https://example.com/cat.webp?x=1", mimeType: "image/webp" } },
    ]);
  });

  it("leaves out empty text and empty turns, which Gemini refuses", () => {
    const out = chatToGemini(
      chat({
        messages: [
          { role: "user", content: "" },
          { role: "assistant", content: "" },
          { role: "user", content: "real question" },
        ],
      }),
      1000,
    );
    expect(out.contents).toEqual([{ role: "user", parts: [{ text: "real question" }] }]);
  });

  it("turns a tool round-trip into functionCall and functionResponse parts named by the call", () => {
    const signed = callIdFor("c2lnbmF0dXJlLWJ5dGVz");
    const plain = callIdFor(undefined);
    const out = chatToGemini(
      chat({
        messages: [
          { role: "user", content: "Weather in Paris and Rome?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [
              {
                id: signed,
                type: "function",
                function: { name: "weather", arguments: '{"city":"Paris"}' },
              },
              {
                id: plain,
                type: "function",
                function: { name: "weather", arguments: '{"city":"Rome"}' },
              },
            ],
          },
          { role: "tool", tool_call_id: signed, content: "sunny" },
          { role: "tool", tool_call_id: plain, content: [{ type: "text", text: "rain" }] },
          { role: "user", content: "Thanks" },
        ],
      }),
      1000,
    );
    expect(out.contents).toEqual([
      { role: "user", parts: [{ text: "Weather in Paris and Rome?" }] },
      {
        role: "model",
        parts: [
          {
            functionCall: { name: "weather", args: { city: "Paris" } },
            thoughtSignature: "c2lnbmF0dXJlLWJ5dGVz",
          },
          { functionCall: { name: "weather", args: { city: "Rome" } } },
        ],
      },
      {
        role: "user",
        parts: [
          { functionResponse: { name: "weather", response: { output: "sunny" } } },
          { functionResponse: { name: "weather", response: { output: "rain" } } },
          { text: "Thanks" },
        ],
      },
    ]);
  });

  it("signs a turn of calls Gemini did not make with the signature Google says to use", () => {
    const out = chatToGemini(
      chat({
        messages: [
          { role: "user", content: "go" },
          {
            role: "assistant",
            content: "Calling.",
            tool_calls: [
              { id: "toolu_01", type: "function", function: { name: "a", arguments: "{}" } },
              { id: "toolu_02", type: "function", function: { name: "b", arguments: "" } },
            ],
          },
          { role: "tool", tool_call_id: "toolu_01", content: "1" },
          { role: "tool", tool_call_id: "toolu_02", content: "2" },
        ],
      }),
      1000,
    );
    expect(out.contents[1].parts).toEqual([
      { text: "Calling." },
      { functionCall: { name: "a", args: {} }, thoughtSignature: unsignedCallSignature },
      { functionCall: { name: "b", args: {} } },
    ]);
  });

  it("refuses a tool result whose call no earlier message made: Gemini needs the name", () => {
    expect(() =>
      chatToGemini(
        chat({ messages: [{ role: "tool", tool_call_id: "call_x", content: "orphan" }] }),
        1000,
      ),
    ).toThrow(UnsupportedRequest);
  });

  it("answers a system prompt alone as the user's turn", () => {
    const out = chatToGemini(chat({ messages: [{ role: "system", content: "Say hi" }] }), 10);
    expect(out.systemInstruction).toBeUndefined();
    expect(out.contents).toEqual([{ role: "user", parts: [{ text: "Say hi" }] }]);
  });
});

describe("chatToGemini: generationConfig, tools, tool choice", () => {
  it("maps the sampling fields, n and the output limit within the model's maximum", () => {
    const out = chatToGemini(
      chat({
        max_completion_tokens: 5000,
        temperature: 0.2,
        top_p: 0.9,
        stop: "END",
        n: 3,
        seed: 7,
      }),
      4096,
    );
    expect(out.generationConfig).toEqual({
      maxOutputTokens: 4096,
      temperature: 0.2,
      topP: 0.9,
      stopSequences: ["END"],
      candidateCount: 3,
      seed: 7,
    });
    expect(chatToGemini(chat({}), 2048).generationConfig?.maxOutputTokens).toBe(2048);
    expect(chatToGemini(chat({ max_tokens: 100 }), 2048).generationConfig?.maxOutputTokens).toBe(
      100,
    );
  });

  it("asks for JSON, and for a JSON schema's shape", () => {
    expect(
      chatToGemini(chat({ response_format: { type: "json_object" } }), 10).generationConfig,
    ).toMatchObject({ responseMimeType: "application/json" });
    const out = chatToGemini(
      chat({
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "person",
            strict: true,
            schema: {
              type: "object",
              properties: { name: { type: "string" } },
              required: ["name"],
              additionalProperties: false,
            },
          },
        },
      }),
      10,
    );
    expect(out.generationConfig).toMatchObject({
      responseMimeType: "application/json",
      responseJsonSchema: {
        type: "object",
        properties: { name: { type: "string" } },
        required: ["name"],
        additionalProperties: false,
      },
    });
  });

  it("declares function tools with their JSON schema, none for a function without parameters", () => {
    const out = chatToGemini(
      chat({
        tools: [
          {
            type: "function",
            function: {
              name: "weather",
              description: "Weather now",
              parameters: {
                $schema: "http://json-schema.org/draft-07/schema#",
                type: "object",
                properties: { city: { type: "string", minLength: 1 } },
                required: ["city"],
              },
            },
          },
          {
            type: "function",
            function: { name: "now", parameters: { type: "object", properties: {} } },
          },
        ],
        tool_choice: { type: "function", function: { name: "weather" } },
      }),
      10,
    );
    expect(out.tools).toEqual([
      {
        functionDeclarations: [
          {
            name: "weather",
            description: "Weather now",
            parametersJsonSchema: {
              type: "object",
              properties: { city: { type: "string", description: "{minLength: 1}" } },
              required: ["city"],
            },
          },
          { name: "now" },
        ],
      },
    ]);
    expect(out.toolConfig).toEqual({
      functionCallingConfig: { mode: "ANY", allowedFunctionNames: ["weather"] },
    });
  });

  it("maps tool_choice auto, none and required", () => {
    const tools = [{ type: "function" as const, function: { name: "f" } }];
    const mode = (tool_choice: ChatCompletionRequest["tool_choice"]) =>
      chatToGemini(chat({ tools, tool_choice }), 10).toolConfig?.functionCallingConfig.mode;
    expect(mode("auto")).toBe("AUTO");
    expect(mode("none")).toBe("NONE");
    expect(mode("required")).toBe("ANY");
  });

  it("refuses a tool that is not a function", () => {
    expect(() => chatToGemini(chat({ tools: [{ type: "custom", custom: {} }] }), 10)).toThrow(
      UnsupportedRequest,
    );
  });
});

describe("toGeminiSchema", () => {
  it("keeps what Google supports, describes the rest, and follows definitions into $defs", () => {
    expect(
      toGeminiSchema({
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        definitions: { Pet: { type: "string", const: "cat" } },
        properties: {
          pet: { $ref: "#/definitions/Pet", description: "dropped beside a $ref" },
          age: { type: "integer", minimum: 0, exclusiveMaximum: 150, multipleOf: 1 },
          tags: {
            type: "array",
            items: { type: "string", pattern: "^[a-z]+$" },
            uniqueItems: true,
          },
          flag: { type: "boolean", const: true },
          owner: { allOf: [{ $ref: "#/$defs/Owner" }], description: "who" },
        },
        $defs: { Owner: { type: "string" } },
      }),
    ).toEqual({
      type: "object",
      $defs: { Pet: { type: "string", enum: ["cat"] }, Owner: { type: "string" } },
      properties: {
        pet: { $ref: "#/$defs/Pet" },
        age: { type: "integer", minimum: 0, description: "{exclusiveMaximum: 150, multipleOf: 1}" },
        tags: {
          type: "array",
          items: { type: "string", description: '{pattern: "^[a-z]+$"}' },
          description: "{uniqueItems: true}",
        },
        flag: { type: "boolean", description: "{const: true}" },
        owner: { $ref: "#/$defs/Owner" },
      },
    });
  });
});

describe("tool-call ids", () => {
  it("carry a thought signature in id-safe characters and give it back as Gemini wrote it", () => {
    const signature = "CiEBjz1rX0ilumvPg6k0sMMUtISoQCLJv2bPJ7Vv9r+Xw0o=";
    const id = callIdFor(signature);
    expect(id).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(signatureOfCallId(id)).toBe(signature);
    // As the messages style shows it to Anthropic's clients.
    expect(signatureOfCallId(id.replace(/^call_/, "toolu_"))).toBe(signature);
    expect(signatureOfCallId(callIdFor(undefined))).toBeUndefined();
    expect(signatureOfCallId("toolu_01ABC")).toBeUndefined();
  });
});
