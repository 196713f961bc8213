import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fakeGemini } from "./support/fake-gemini.js";
import type { FakeUpstream } from "./support/fake-upstream.js";

/**
 * The fake Gemini API refuses what Google's refuses, in Google's error shape: the gateway's Gemini
 * tests (test/gemini.test.ts and the client-library suites) only prove something because of it.
 */

const KEY = "AIza-fake-test-key";
let fake: FakeUpstream;

beforeAll(async () => {
  fake = await fakeGemini({ apiKeys: [KEY], maxOutputTokens: 100 });
});
afterAll(async () => fake?.close());

const generate = "/v1beta/models/gemini-2.5-flash:generateContent";
const hello = { contents: [{ role: "user", parts: [{ text: "hi" }] }] };

async function send(
  body: unknown,
  { path = generate, headers = { "x-goog-api-key": KEY } as Record<string, string> } = {},
) {
  const res = await fetch(`${fake.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { error?: { code: number; status: string; message: string } };
  return { status: res.status, error: json.error, body: json };
}

describe("the fake Gemini API", () => {
  it("answers a well-formed request", async () => {
    const answer = await send(hello);
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ candidates: [{ content: { role: "model" } }] });
  });

  it("refuses a key that is missing, wrong, a bearer token or in the URL", async () => {
    expect((await send(hello, { headers: {} })).error).toMatchObject({
      code: 403,
      status: "PERMISSION_DENIED",
    });
    const wrong = await send(hello, { headers: { "x-goog-api-key": "AIza-other" } });
    expect(wrong.status).toBe(400);
    expect(JSON.stringify(wrong.error)).toContain("API_KEY_INVALID");
    expect(
      (await send(hello, { headers: { authorization: `Bearer ${KEY}` } })).error,
    ).toMatchObject({ code: 401, status: "UNAUTHENTICATED" });
    expect((await send(hello, { path: `${generate}?key=${KEY}` })).status).toBe(403);
  });

  it("refuses unknown fields, other roles, empty parts and empty text", async () => {
    const refused = [
      { ...hello, messages: [] },
      { contents: [{ role: "assistant", parts: [{ text: "x" }] }] },
      { contents: [{ role: "user", parts: [] }] },
      { contents: [{ role: "user", parts: [{ text: "" }] }] },
      { ...hello, generationConfig: { max_tokens: 5 } },
      { ...hello, generationConfig: { maxOutputTokens: 101 } },
    ];
    for (const body of refused) {
      expect(await send(body)).toMatchObject({
        status: 400,
        error: { code: 400, status: "INVALID_ARGUMENT" },
      });
    }
  });

  it("refuses an inline image of a type Google does not read (image/jpg is not image/jpeg)", async () => {
    const image = (mimeType: string) => ({
      contents: [{ role: "user", parts: [{ inlineData: { mimeType, data: "AAAA" } }] }],
    });
    expect(await send(image("image/jpg"))).toMatchObject({
      status: 400,
      error: { status: "INVALID_ARGUMENT", message: "Unsupported MIME type: image/jpg" },
    });
    expect((await send(image("image/jpeg"))).status).toBe(200);
  });

  it("refuses a function response without a name, or not answering each call", async () => {
    const call = {
      role: "model",
      parts: [{ functionCall: { name: "f", args: {} }, thoughtSignature: "c2ln" }],
    };
    const unnamed = [
      hello.contents[0],
      call,
      { role: "user", parts: [{ functionResponse: { response: { output: "x" } } }] },
    ];
    expect((await send({ contents: unnamed })).status).toBe(400);
    const twoForOne = [
      hello.contents[0],
      call,
      {
        role: "user",
        parts: [
          { functionResponse: { name: "f", response: { output: "x" } } },
          { functionResponse: { name: "f", response: { output: "y" } } },
        ],
      },
    ];
    expect((await send({ contents: twoForOne })).status).toBe(400);
  });

  it("refuses a function call of the current turn sent back without its thought signature", async () => {
    const contents = [
      hello.contents[0],
      { role: "model", parts: [{ functionCall: { name: "f", args: {} } }] },
      { role: "user", parts: [{ functionResponse: { name: "f", response: { output: "x" } } }] },
    ];
    const refused = await send({ contents });
    expect(refused.status).toBe(400);
    expect(refused.error?.message).toContain("thought_signature");
  });

  it("refuses schema keywords Google does not take, in either schema field", async () => {
    const tool = (declaration: object) => ({
      ...hello,
      tools: [{ functionDeclarations: [{ name: "f", ...declaration }] }],
    });
    const schema = { type: "object", properties: { a: { type: "string" } } };
    expect(
      (await send(tool({ parameters: { ...schema, additionalProperties: false } }))).error?.message,
    ).toContain('Unknown name "additionalProperties"');
    expect((await send(tool({ parametersJsonSchema: { ...schema, $schema: "x" } }))).status).toBe(
      400,
    );
    expect(
      (await send(tool({ parametersJsonSchema: { ...schema, additionalProperties: false } })))
        .status,
    ).toBe(200);
    const refs = { $ref: "#/$defs/A", description: "beside a $ref", $defs: { A: schema } };
    expect((await send(tool({ parametersJsonSchema: refs }))).status).toBe(400);
  });

  it("refuses a function name OpenAI takes but Google does not: a digit or dash first, over 64 characters", async () => {
    const named = (name: string) => ({ ...hello, tools: [{ functionDeclarations: [{ name }] }] });
    for (const name of ["2fa-check", "-x", "a".repeat(65), "has space"])
      expect((await send(named(name))).error?.message, name).toContain("Invalid function name");
    for (const name of ["_2fa-check", "ns.tool:v1-x", "a".repeat(64)])
      expect((await send(named(name))).status, name).toBe(200);
  });

  it("refuses more than eight candidates", async () => {
    const candidates = (candidateCount: number) => ({
      ...hello,
      generationConfig: { candidateCount },
    });
    expect((await send(candidates(9))).status).toBe(400);
    expect((await send(candidates(8))).status).toBe(200);
  });

  it("refuses a JSON answer beside function calling on Gemini 2.x, not with calling off, not on Gemini 3", async () => {
    const body = (mode?: string) => ({
      ...hello,
      tools: [{ functionDeclarations: [{ name: "f" }] }],
      ...(mode ? { toolConfig: { functionCallingConfig: { mode } } } : {}),
      generationConfig: { responseMimeType: "application/json" },
    });
    expect((await send(body())).error?.message).toBe(
      "Function calling with a response mime type: 'application/json' is unsupported",
    );
    expect((await send(body("ANY"))).status).toBe(400);
    expect((await send(body("NONE"))).status).toBe(200);
    const gemini3 = { path: "/v1beta/models/gemini-3-flash-preview:generateContent" };
    expect((await send(body(), gemini3)).status).toBe(200);
    const { tools: _, ...jsonOnly } = body();
    expect((await send(jsonOnly)).status).toBe(200);
  });
});
