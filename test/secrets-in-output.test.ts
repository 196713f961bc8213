import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { requestLinePrinter } from "../src/cli/request-lines.js";
import { type CliHome, cliHome, killRunningClis, runCli } from "./support/cli.js";
import { fakeGemini, geminiError, geminiJson } from "./support/fake-gemini.js";
import { deferred, type FakeUpstream, openaiStreamSteps, sleep } from "./support/fake-upstream.js";
import {
  baseConfigWith,
  chat,
  LOGIN_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { streamEvents } from "./support/sse.js";

/**
 * An adversarial pass: no provider credential reaches a file the gateway writes (cassettes
 * included), whatever wire carried it; and what a client chooses (a model name, a key label)
 * cannot forge or break `gateway serve`'s one line per request.
 */

const GEMINI_KEY = "AIzaSy-hunt-gemini-secret-0123456789";
const OPENAI_KEY = "sk-proj-Qx7Vb9LmNp2Rt4Wy6Za8Cd0Ef3Gh5Jk";
const GATEWAY_KEY = "kn-Hq3Wm8Pz5Lx1Nv7Bc4Rt9Ky2Dg6Fs0Tj8Ue4Ai1Oy";

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
  killRunningClis();
  await gw?.close();
  gw = undefined;
});

/** A server on 127.0.0.1 answering with `handler`, closed with its connections by `close`. */
async function localServer(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The pieces of `secret` that `text` holds: every run of 8 of its characters, as a key cut short
 * (a line trimmed, a stream split) still gives most of it away; and the whole of it in base64.
 */
function piecesOf(secret: string, text: string | Buffer): string[] {
  const bytes = Buffer.from(text);
  const found: string[] = [];
  for (let at = 0; at + 8 <= secret.length; at++) {
    const piece = secret.slice(at, at + 8);
    if (bytes.includes(Buffer.from(piece))) found.push(piece);
  }
  if (bytes.includes(Buffer.from(Buffer.from(secret).toString("base64")))) found.push("(base64)");
  return found;
}

/** Every file under `dir` whose bytes hold a piece of `needle` (or its base64). */
function filesHolding(dir: string, needle: string): string[] {
  const found: string[] = [];
  for (const file of readdirSync(dir, { recursive: true }) as string[]) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(join(dir, file));
    } catch {
      continue;
    }
    if (piecesOf(needle, bytes).length > 0) found.push(file);
  }
  return found;
}

describe("record mode on the gemini wire", () => {
  it("never writes the gemini key (x-goog-api-key) into a cassette, wherever the answer echoed it", async () => {
    const dir = join(root, "gemini-cassettes");
    gw = await testGateway({
      config: baseConfigWith({
        providers: [{ id: "gem", wire: "gemini", base_url: gemini.url, api_keys: [GEMINI_KEY] }],
        models: [{ name: "gem-model", provider: "gem", upstream_model: "gemini-2.5-flash" }],
      }),
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

describe("record mode on a stream", () => {
  it("never writes a key the answer streamed into a cassette, wherever the connection split it", async () => {
    const dir = join(root, "split-cassettes");
    // The provider streams the key it was sent back; the connection cuts the answer in the
    // middle of the key: the rest is written only once the client has the text before it.
    const steps = openaiStreamSteps(["Hello", ` you sent ${OPENAI_KEY}`]);
    const text = steps
      .map(
        (step) =>
          `data: ${typeof step.data === "string" ? step.data : JSON.stringify(step.data)}\n\n`,
      )
      .join("");
    const cut = text.indexOf(OPENAI_KEY) + OPENAI_KEY.length / 2;
    const clientHasHello = deferred();
    const upstream = await localServer((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(text.slice(0, cut));
        void clientHasHello.promise.then(() => res.end(text.slice(cut)));
      });
    });
    try {
      gw = await testGateway({
        config: baseConfigWith({
          providers: [{ id: "oa", wire: "openai", base_url: upstream.url, api_keys: [OPENAI_KEY] }],
          models: [{ name: "oa-model", provider: "oa" }],
        }),
        cassettes: { dir, mode: "record" },
      });
      const res = await post(gw, "/v1/chat/completions", chat("hi", "oa-model", { stream: true }));
      expect(res.status).toBe(200);
      let said = "";
      for await (const event of streamEvents(res)) {
        if (event.data === "[DONE]") break;
        said += event.data.choices[0]?.delta?.content ?? "";
        if (said === "Hello") clientHasHello.resolve();
      }
      expect(said).toBe(`Hello you sent ${OPENAI_KEY}`);
      await gw.close();
      gw = undefined;
      expect(readdirSync(dir)).toHaveLength(1);
      expect(filesHolding(dir, OPENAI_KEY)).toEqual([]);
    } finally {
      clientHasHello.resolve();
      await upstream.close();
    }
  });
});

describe("the CLI's messages", () => {
  /** Runs the CLI expecting a refusal: its stderr, and the pieces of either key it holds. */
  async function refused(home: CliHome, args: string[], env: NodeJS.ProcessEnv = {}) {
    const done = await runCli(args, { ...home.env, ...env });
    expect(done.code).not.toBe(0);
    const said = done.stderr.trim();
    return { said, leaked: [...piecesOf(OPENAI_KEY, said), ...piecesOf(GATEWAY_KEY, said)] };
  }

  it("quote a gateway URL without its user, password, query or fragment, nor a key given as the URL", async () => {
    const home = cliHome({ GATEWAY_API_KEY: GATEWAY_KEY });
    try {
      const noQuery = (shown: string) =>
        `gateway: the gateway URL takes no query, fragment or credentials, got "${shown}"; use something like http://127.0.0.1:8787`;
      const notHttp = (shown: string) =>
        `gateway: the gateway URL must start with http:// or https://, got "${shown}"`;
      const cases: [string[], NodeJS.ProcessEnv, string][] = [
        [
          ["whoami", "--base-url", `http://tool:${OPENAI_KEY}@127.0.0.1:1/v1`],
          {},
          noQuery("http://***@127.0.0.1:1/v1"),
        ],
        [
          ["whoami", "--base-url", `http://127.0.0.1:1/v1?key=${OPENAI_KEY}`],
          {},
          noQuery("http://127.0.0.1:1/v1?***"),
        ],
        [
          ["whoami"],
          { GATEWAY_BASE_URL: `http://127.0.0.1:1/#${GATEWAY_KEY}` },
          noQuery("http://127.0.0.1:1/#***"),
        ],
        [["whoami", "--base-url", `${OPENAI_KEY}@127.0.0.1:1`], {}, notHttp("***@127.0.0.1:1")],
        // The key itself where the URL goes (the two variables mixed up).
        [["whoami"], { GATEWAY_BASE_URL: GATEWAY_KEY }, notHttp("kn-[redacted]")],
      ];
      const seen = [];
      for (const [args, env] of cases) seen.push(await refused(home, args, env));
      expect(seen).toEqual(cases.map(([, , said]) => ({ said, leaked: [] })));
    } finally {
      home.remove();
    }
  });

  it("quote serve's --public-url without its user and password", async () => {
    const home = cliHome();
    try {
      const url = `ftp://tool:${OPENAI_KEY}@gateway.example`;
      const { said, leaked } = await refused(home, [
        "serve",
        "--db",
        ":memory:",
        "--public-url",
        url,
      ]);
      expect(leaked).toEqual([]);
      expect(said).toContain('must be an http:// or https:// URL, got "ftp://***@gateway.example"');
    } finally {
      home.remove();
    }
  });

  it("repeat no key a server echoed in its refusal, whole or cut where the line is trimmed", async () => {
    const answers: ((auth: string) => { status: number; type: string; body: string })[] = [
      (auth) => ({ status: 401, type: "text/plain", body: `no such key: ${auth}` }),
      // Cut to a line of 200 characters, the key's start would be left.
      (auth) => ({ status: 401, type: "text/plain", body: `${"-".repeat(190)} ${auth}` }),
      (auth) => ({
        status: 400,
        type: "application/json",
        body: JSON.stringify({ error: { message: `you sent ${auth}`, code: auth } }),
      }),
      (auth) => ({ status: 502, type: "text/html", body: `<p>proxy saw ${auth}</p>` }),
      (auth) => ({
        status: 429,
        type: "application/json",
        body: JSON.stringify({ error: auth, error_description: `slow down, ${auth}` }),
      }),
    ];
    let next = 0;
    const echo = await localServer((req, res) => {
      const answer = answers[next++](String(req.headers.authorization));
      res.writeHead(answer.status, { "content-type": answer.type });
      res.end(answer.body);
    });
    const home = cliHome({ GATEWAY_API_KEY: GATEWAY_KEY });
    try {
      const seen = [];
      for (const _ of answers) {
        const { said, leaked } = await refused(home, ["whoami", "--base-url", echo.url]);
        seen.push({ status: /\b(401|400|502|429)\b/.exec(said)?.[1], leaked });
      }
      expect(seen).toEqual(
        ["401", "401", "400", "502", "429"].map((status) => ({ status, leaked: [] })),
      );
    } finally {
      home.remove();
      await echo.close();
    }
  });
});

describe("config refusals", () => {
  it("quote no provider key from the line that is not JSON, and still say where it is", async () => {
    const home = cliHome();
    try {
      const broken = join(home.dir, "broken.json");
      writeFileSync(
        broken,
        `{\n  "providers": [\n    { "id": "oa", "wire": "openai", "api_keys": [${OPENAI_KEY}] }\n  ]\n}\n`,
      );
      const done = await runCli(["serve", "--db", ":memory:", "--config", broken], home.env);
      expect(done.code).not.toBe(0);
      expect(piecesOf(OPENAI_KEY, done.stderr)).toEqual([]);
      // The key's first character, where the JSON breaks.
      expect(done.stderr).toMatch(
        new RegExp(`${broken} is not valid JSON: [^\n]+ at line 3, column 50\n`),
      );
    } finally {
      home.remove();
    }
  });

  it("quote a value from the environment as the config wrote it: a key in the wrong field is not repeated", async () => {
    const home = cliHome();
    try {
      // A BYOK entry with its two fields swapped: the key, from the environment, names the
      // provider. The config syntax is a literal `${NAME}` in a plain string.
      const placeholder = ["$", "{OPENAI_BYOK}"].join("");
      const swapped = join(home.dir, "swapped.json");
      writeFileSync(
        swapped,
        JSON.stringify({
          providers: [{ id: "oa", wire: "openai", base_url: "http://127.0.0.1:1/v1" }],
          accounts: [{ id: "acct", byok: [{ provider: placeholder, key: "oa" }] }],
        }),
      );
      const done = await runCli(["serve", "--db", ":memory:", "--config", swapped], {
        ...home.env,
        OPENAI_BYOK: OPENAI_KEY,
      });
      expect(done.code).not.toBe(0);
      expect(piecesOf(OPENAI_KEY, done.stderr)).toEqual([]);
      expect(done.stderr).toContain(
        `accounts[0].byok[0].provider: unknown provider "${placeholder}"`,
      );
    } finally {
      home.remove();
    }
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

  it("writes no gateway key a client sent as the model name, in either format", async () => {
    for (const format of ["text", "json"] as const) {
      let out = "";
      const sink = new Writable({
        write(chunk: Buffer, _encoding, done) {
          out += chunk.toString();
          done();
        },
      }) as unknown as NodeJS.WriteStream;
      gw = await testGateway({ onRequest: requestLinePrinter(format, sink) });
      // The SDK's two settings swapped: the key sent as the model, the model name as the key.
      const res = await post(gw, "/v1/chat/completions", chat("hi", GATEWAY_KEY));
      expect(res.status).toBe(400);
      await res.text();
      await lineOf(() => out, res.headers.get("x-request-id")!);
      expect(out).toContain("kn-[redacted]");
      expect([format, piecesOf(GATEWAY_KEY, out)]).toEqual([format, []]);
      await gw.close();
      gw = undefined;
    }
  });

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
