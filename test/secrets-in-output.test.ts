import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { requestLinePrinter } from "../src/cli/request-lines.js";
import { fakeGemini, geminiError, geminiJson } from "./support/fake-gemini.js";
import { type FakeUpstream, sleep } from "./support/fake-upstream.js";
import {
  baseConfig,
  chat,
  LOGIN_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/**
 * An adversarial pass: no provider credential reaches a file the gateway writes (cassettes
 * included), whatever wire carried it; and what a client chooses (a model name, a key label)
 * cannot forge or break `gateway serve`'s one line per request.
 */

const GEMINI_KEY = "AIzaSy-hunt-gemini-secret-0123456789";

let root: string;
let gemini: FakeUpstream;
let gw: TestGateway | undefined;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "gateway-hunt-"));
  gemini = await fakeGemini();
});
afterAll(async () => {
  await gemini?.close();
  rmSync(root, { recursive: true, force: true });
});
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

/** Every file under `dir` whose bytes hold `needle` (or its base64). */
function filesHolding(dir: string, needle: string): string[] {
  const found: string[] = [];
  const b64 = Buffer.from(needle).toString("base64");
  for (const file of readdirSync(dir, { recursive: true }) as string[]) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(join(dir, file));
    } catch {
      continue;
    }
    if (bytes.includes(Buffer.from(needle)) || bytes.includes(Buffer.from(b64))) found.push(file);
  }
  return found;
}

describe("record mode on the gemini wire", () => {
  it("never writes the gemini key (x-goog-api-key) into a cassette, wherever the answer echoed it", async () => {
    const dir = join(root, "gemini-cassettes");
    const base = baseConfig();
    gw = await testGateway({
      config: {
        ...base,
        providers: [
          ...base.providers!,
          { id: "gem", wire: "gemini", base_url: gemini.url, api_keys: [GEMINI_KEY] },
        ],
        models: [
          ...base.models!,
          { name: "gem-model", provider: "gem", upstream_model: "gemini-2.5-flash" },
        ],
      },
      cassettes: { dir, mode: "record" },
    });
    // A provider that quotes the credential it was sent: in a rejection and in an answer.
    gemini.reset();
    gemini.queue(
      geminiError(400, "INVALID_ARGUMENT", `API key ${GEMINI_KEY} is not valid for this model.`),
      geminiJson(`debug: you sent ${GEMINI_KEY}`),
    );
    const refused = await post(gw, "/v1/chat/completions", {
      model: "gem-model",
      messages: [{ role: "user", content: "first" }],
    });
    expect(refused.status).toBe(400);
    expect(await refused.text()).not.toContain(GEMINI_KEY);
    const answered = await post(gw, "/v1/chat/completions", {
      model: "gem-model",
      messages: [{ role: "user", content: "second" }],
    });
    expect(answered.status).toBe(200);
    await answered.text();
    expect(gemini.requests.map((r) => r.headers["x-goog-api-key"])).toEqual([
      GEMINI_KEY,
      GEMINI_KEY,
    ]);
    expect(readdirSync(dir)).toHaveLength(2);
    expect(filesHolding(dir, GEMINI_KEY)).toEqual([]);
  });
});

describe("serve's text line per request", () => {
  /** The printer `gateway serve` uses, writing to a string instead of the terminal. */
  function capturedLines() {
    let out = "";
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        out += chunk.toString();
        done();
      },
    }) as unknown as NodeJS.WriteStream;
    return { printer: requestLinePrinter("text", sink), text: () => out };
  }

  /** Waits (bounded) until the line of the request with this id was written. */
  async function lineOf(text: () => string, requestId: string): Promise<void> {
    for (let i = 0; i < 200 && !text().includes(requestId); i++) await sleep(10);
  }

  it("stays one line per request: a client's model name or key label cannot add lines or terminal escapes", async () => {
    const lines = capturedLines();
    gw = await testGateway({ onRequest: lines.printer });
    const forged =
      "\r\n00:00:00  200  POST /v1/forged  mock-gpt  1 ms  \u001b[2J\u001b]0;pwned\u0007";
    // Any key holder names the model; a login key's holder names the keys it mints.
    const unknownModel = await post(gw, "/v1/chat/completions", chat("hi", `nope${forged}`));
    expect(unknownModel.status).toBe(400);
    await unknownModel.text();
    const minted = await post(
      gw,
      "/api/keys",
      { label: `tool${forged}` },
      { authorization: `Bearer ${LOGIN_KEY}` },
    );
    expect(minted.status).toBe(201);
    const { key } = (await minted.json()) as { key: string };
    const used = await post(gw, "/v1/chat/completions", chat("hi"), {
      authorization: `Bearer ${key}`,
    });
    expect(used.status).toBe(200);
    await used.text();
    const ids = [unknownModel, minted, used].map((r) => r.headers.get("x-request-id")!);
    await lineOf(lines.text, ids[2]);

    const written = lines
      .text()
      .split("\n")
      .filter((line) => line !== "");
    // One line per request, each ending with its own id, none carrying a control character.
    expect(written.map((line) => line.split("  ").at(-1))).toEqual(ids);
    for (const line of written) expect(line).not.toMatch(/\p{Cc}/u);
  });
});
