import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import {
  ConfigError,
  type GatewayConfig,
  type GatewayOptions,
  type RunningGateway,
  startGateway,
} from "../src/index.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { money } from "./support/api.js";
import { ADMIN_KEY, baseConfig, chat, KEY, POOR_KEY, post } from "./support/gateway.js";
import { createTestDatabase } from "./support/postgres.js";

/**
 * A developer's own test suite with the test kit in it: the package imported as a consumer does
 * (ESM and CommonJS, its published types), several gateways at once, close() with work in flight,
 * fake timers in the app, the SDKs' own retries against a script, the errors the SDKs raise, and
 * the kit's view of charges against /v1/usage. What the kit's own tests do not already cover.
 */

const run = promisify(execFile);
const root = join(import.meta.dirname, "..");
const config = (): GatewayConfig => baseConfig();

const open: RunningGateway[] = [];
async function gateway(options: GatewayOptions = {}): Promise<RunningGateway> {
  const gw = await startGateway({ config: config(), ...options });
  open.push(gw);
  return gw;
}
afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(open.splice(0).map((gw) => gw.close()));
});

const openai = (gw: RunningGateway, options: { maxRetries?: number } = {}) =>
  new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, ...options });
const anthropic = (gw: RunningGateway, options: { maxRetries?: number } = {}) =>
  new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, ...options });

/** A long streamed completion whose client reads its first bytes and then stops reading. */
function pausedStream(gw: RunningGateway): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    });
    req.on("response", (res) =>
      res.once("data", () => {
        res.pause();
        resolve();
      }),
    );
    req.on("error", reject);
    req.end(JSON.stringify(chat("[[mock:words=100000]] go", "mock-gpt", { stream: true })));
  });
}

/** Resources of the given kind this process holds (`process.getActiveResourcesInfo()`). */
const held = (kind: string) => process.getActiveResourcesInfo().filter((r) => r === kind).length;

/** Waits (a bounded number of event-loop turns) until `done()` holds. */
async function eventually(done: () => boolean | Promise<boolean>): Promise<boolean> {
  for (let turn = 0; turn < 500; turn++) {
    if (await done()) return true;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return false;
}

/** A fresh database of the backend: SQLite in memory, or one on the run's Postgres server. */
async function databaseOf(backend: "sqlite" | "postgres"): Promise<string> {
  if (backend === "sqlite") return ":memory:";
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  return createTestDatabase();
}

/** The gateway's admitted, unsettled holds, as /metrics shows them. */
async function holdsInFlight(gw: RunningGateway): Promise<number> {
  const res = await fetch(`${gw.url}/metrics`, {
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
  });
  return Number(/^gateway_holds_in_flight (\d+)$/m.exec(await res.text())?.[1]);
}

// ---- the package as a consumer installs it ------------------------------------------------

describe("model-gateway imported as a consumer does (the built package)", () => {
  let consumer: string;

  beforeAll(() => {
    consumer = mkdtempSync(join(tmpdir(), "kit-consumer-"));
    const modules = join(consumer, "node_modules");
    mkdirSync(join(modules, "@types"), { recursive: true });
    mkdirSync(join(modules, "@anthropic-ai"), { recursive: true });
    // The package by its name (its package.json's exports pick dist/ or cjs/), beside what the
    // docs' examples import.
    symlinkSync(root, join(modules, "model-gateway"));
    for (const dep of ["@types/node", "openai", "@anthropic-ai/sdk"])
      symlinkSync(join(root, "node_modules", dep), join(modules, dep));
    writeFileSync(
      join(consumer, "package.json"),
      JSON.stringify({ name: "app", private: true, type: "module" }),
    );
  });
  afterAll(() => rmSync(consumer, { recursive: true, force: true }));

  it("every ts example of docs/test-kit.md, its 500 recipe and a CommonJS file using the kit's types compile with skipLibCheck false", async () => {
    const doc = readFileSync(join(root, "docs/test-kit.md"), "utf8");
    const blocks = [...doc.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
    expect(blocks.length).toBeGreaterThan(4);
    const files = blocks.map((code, i) => {
      writeFileSync(join(consumer, `block${i}.ts`), `${code}export {};\n`);
      return `block${i}.ts`;
    });
    // "Every error on demand": the 500 row's call, as a consumer copies it.
    const recipe = /^\| 500 `internal_error` \| `(startGateway\(.*\))` \|/m.exec(doc)?.[1];
    expect(recipe).toBeDefined();
    writeFileSync(
      join(consumer, "recipe500.ts"),
      `import { startGateway } from "model-gateway";\nconst gateway = await ${recipe};\nawait gateway.close();\nexport {};\n`,
    );
    // "types included": a CommonJS TypeScript file names the kit's types as an ESM one does.
    writeFileSync(
      join(consumer, "kit.cts"),
      `import { load, startGateway, type CassetteOptions, type ConfigError, type ExtraRoute,
  type InspectedRequest, type MockRule, type RequestsQuery } from "model-gateway";
export async function rows(cassettes?: CassetteOptions): Promise<InspectedRequest[]> {
  const boom: ExtraRoute = { method: "GET", path: "/v1/boom", access: "key", errors: "chat",
    handler: () => { throw new Error("boom"); } };
  const gateway = await startGateway({ cassettes, extraRoutes: [boom] });
  const rule: MockRule = { match: { user_text: "hi" }, reply: { text: "hello" } };
  gateway.mock.reply(rule);
  const query: RequestsQuery = { limit: 1 };
  const failure: ConfigError | undefined = undefined;
  void failure;
  void (await load()).ConfigError;
  return gateway.listRequests(query);
}
`,
    );
    writeFileSync(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          target: "es2022",
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          types: ["node"],
        },
        files: [...files, "recipe500.ts", "kit.cts"],
      }),
    );
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    const done = await run(process.execPath, [tsc, "-p", consumer]).catch(
      (err: { stdout: string; stderr: string }) => err,
    );
    expect(`${done.stdout}${done.stderr}`).toBe("");
  }, 60_000);

  it("ESM and CommonJS programs start gateways from the package, get the 500 on demand, and exit by themselves", async () => {
    const recipe = `{ extraRoutes: [{ method: "GET", path: "/v1/boom", access: "key", errors: "chat", handler: () => { throw new Error("boom"); } }] }`;
    const body = (load: string) => `${load}
async function main() {
  const [a, b] = await Promise.all([startGateway(${recipe}), startGateway()]);
  const res = await fetch(a.url + "/v1/boom", { headers: { authorization: "Bearer " + a.demoKey } });
  const error = (await res.json()).error;
  const models = await fetch(b.url + "/v1/models", { headers: { authorization: "Bearer " + b.demoKey } });
  await Promise.all([a.close(), b.close()]);
  console.log(JSON.stringify({ boom: [res.status, error.code], models: models.status, ports: a.port !== b.port }));
}
main();
`;
    writeFileSync(join(consumer, "app.mjs"), body(`import { startGateway } from "model-gateway";`));
    writeFileSync(
      join(consumer, "app.cjs"),
      body(`const { startGateway } = require("model-gateway");`),
    );
    for (const file of ["app.mjs", "app.cjs"]) {
      // A handle left open keeps the program alive until the timeout kills it.
      const done = await run(process.execPath, [file], { cwd: consumer, timeout: 30_000 });
      // The one line a gateway prints for a fault of its own, and nothing else.
      expect(done.stderr, file).toBe("internal error on GET /v1/boom: Error: boom\n");
      expect(JSON.parse(done.stdout), file).toEqual({
        boom: [500, "internal_error"],
        models: 200,
        ports: true,
      });
    }
  }, 60_000);

  it("a program that closes its gateway while a stream is under way prints nothing and exits by itself", async () => {
    writeFileSync(
      join(consumer, "cut.mjs"),
      `import { startGateway } from "model-gateway";
const gateway = await startGateway();
const res = await fetch(gateway.url + "/v1/chat/completions", {
  method: "POST",
  headers: { authorization: "Bearer " + gateway.demoKey, "content-type": "application/json" },
  body: JSON.stringify({ model: "mock-gpt", stream: true, messages: [{ role: "user", content: "[[mock:words=100000]] go" }] }),
});
const reader = res.body.getReader();
await reader.read();
const rest = (async () => { while (!(await reader.read()).done); return "whole"; })().catch(() => "cut");
await gateway.close();
console.log(await rest);
`,
    );
    const done = await run(process.execPath, ["cut.mjs"], { cwd: consumer, timeout: 30_000 });
    expect(done.stdout).toBe("cut\n");
    // Not "ledger: a settlement batch failed to commit: The database connection is not open".
    expect(done.stderr).toBe("");
  }, 60_000);
});

// ---- many gateways, and close() ---------------------------------------------------------

describe("eight gateways in one suite", () => {
  it("start at once, each with its own port, database and script, and close with streams in flight, leaving no server handle", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kit-eight-"));
    const servers = held("TCPServerWrap");
    const gws = await Promise.all(
      Array.from({ length: 8 }, (_, i) => gateway({ db: join(dir, `app-${i}.db`) })),
    );
    expect(new Set(gws.map((gw) => gw.port)).size).toBe(8);
    gws.forEach((gw, i) => {
      gw.mock.reply({ user_text: "who" }, { text: `gateway ${i}` });
    });
    const answers = await Promise.all(
      gws.map(async (gw) => {
        const done = await openai(gw).chat.completions.create({
          model: "mock-gpt",
          messages: [{ role: "user", content: "who" }],
        });
        return done.choices[0].message.content;
      }),
    );
    expect(answers).toEqual(gws.map((_, i) => `gateway ${i}`));
    // Each request log holds its own gateway's request only.
    for (const gw of gws) expect(await gw.listRequests()).toHaveLength(1);

    await Promise.all(gws.map((gw) => pausedStream(gw)));
    await Promise.all(gws.map((gw) => gw.close()));
    // Again, as an afterEach that closes what a test closed already does.
    await Promise.all(gws.map((gw) => gw.close()));
    expect(await eventually(() => held("TCPServerWrap") <= servers)).toBe(true);
    await expect(gws[0].listRequests()).rejects.toThrow(/this gateway is closed/);
    await expect(fetch(`${gws[0].url}/v1/models`)).rejects.toThrow();

    // What each was doing when it closed is in its log, settled, and nothing stays held.
    const reopened = await gateway({ db: join(dir, "app-3.db") });
    const rows = await reopened.listRequests();
    expect(rows.map((r) => [r.state, r.error_code])).toEqual([
      ["settled", "client_closed"],
      ["settled", null],
    ]);
    expect((await money(reopened)).held).toBe(0);
    await reopened.close();
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);
});

describe("close() while requests are in flight", () => {
  for (const backend of ["sqlite in memory", "sqlite file", "postgres"] as const) {
    it(`every request it cut off settles before the store closes (${backend}): nothing logged as failing, nothing left held`, async () => {
      const dir = mkdtempSync(join(tmpdir(), "kit-close-"));
      const db =
        backend === "sqlite file"
          ? join(dir, "app.db")
          : await databaseOf(backend === "postgres" ? "postgres" : "sqlite");
      const gw = await startGateway({ config: config(), db, keepaliveMs: 50 });
      const logged: string[] = [];
      const spy = vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
        logged.push(args.join(" "));
      });
      try {
        // A stream its client stopped reading, a stream waiting for its first token, and a whole
        // answer waiting for its provider.
        await pausedStream(gw);
        const waiting = await post(gw, "/v1/chat/completions", {
          ...chat("[[mock:delay=60000]] later"),
          stream: true,
        });
        await waiting.body?.getReader().read();
        const whole = post(gw, "/v1/chat/completions", chat("[[mock:delay=60000]] later")).catch(
          (err: Error) => err,
        );
        expect(await eventually(async () => (await holdsInFlight(gw)) === 3)).toBe(true);
        await gw.close();
        expect(await whole).toBeInstanceOf(Error);
        // Room for a settlement that came after the store closed to say so.
        await new Promise((resolve) => setTimeout(resolve, 200));
      } finally {
        spy.mockRestore();
      }
      expect(logged).toEqual([]);
      if (backend !== "sqlite in memory") {
        const again = await startGateway({ config: config(), db });
        const rows = await again.listRequests();
        expect((await money(again)).held).toBe(0);
        await again.close();
        expect(rows.map((r) => r.error_code)).toEqual(Array(3).fill("client_closed"));
      }
      rmSync(dir, { recursive: true, force: true });
    }, 30_000);
  }
});

// ---- an app whose tests fake the timers --------------------------------------------------

describe("an app suite that fakes the timers (vi.useFakeTimers()) around the gateway", () => {
  const ask = (gw: RunningGateway, body: object) =>
    // AbortSignal.timeout runs on Node's own timers: the wait stays bounded under fake ones.
    post(gw, "/v1/chat/completions", body, undefined, AbortSignal.timeout(5_000));

  it("the manual clock still jumps for two awaited free requests, and a scripted delay still ends", async () => {
    const gw = await gateway({ clock: "manual", now: () => Date.parse("2030-01-01T12:00:00Z") });
    vi.useFakeTimers();
    expect((await ask(gw, chat("one", "mock-gpt:free"))).status).toBe(200);
    const second = await ask(gw, chat("two", "mock-gpt:free"));
    expect(second.status).toBe(200);
    expect(second.headers.get("x-gateway-burst-wait-ms")).toBe("200");
    gw.mock.reply({ user_text: "slow" }, { text: "at last", delay_ms: 30 }, { times: 2 });
    const slow = await ask(gw, chat("slow"));
    expect(((await slow.json()) as OpenAI.ChatCompletion).choices[0].message.content).toBe(
      "at last",
    );
    // The SDKs (their own timers faked too), several at once.
    const answers = await Promise.all([
      openai(gw).chat.completions.create({
        model: "mock-gpt",
        messages: [{ role: "user", content: "slow" }],
      }),
      anthropic(gw).messages.create({
        model: "mock-gpt",
        max_tokens: 50,
        messages: [{ role: "user", content: "hi" }],
      }),
    ]);
    expect(answers[0].choices[0].message.content).toBe("at last");
    expect(answers[1].stop_reason).toBe("end_turn");
  }, 20_000);
});

// ---- scripts and the SDKs' own retries ---------------------------------------------------

describe("a script the SDKs retry through", () => {
  it("a 429 then the answer: the OpenAI SDK's default retry gets the answer; the log shows both, the 429 charged nothing", async () => {
    const gw = await gateway();
    gw.mock.reply({ user_text: "busy" }, { error: { status: 429 } }, { times: 1 });
    gw.mock.reply({ user_text: "busy" }, { text: "done after a retry" }, { times: 1 });
    const answer = await openai(gw, { maxRetries: 2 }).chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "busy" }],
    });
    expect(answer.choices[0].message.content).toBe("done after a retry");
    const [last, first] = await gw.listRequests({ limit: 2 });
    expect(last).toMatchObject({ id: answer._request_id, status: 200 });
    expect(first).toMatchObject({ status: 429, error_code: "upstream_error", cost_micro: 0 });
  });

  it("a 503 then the answer: the Anthropic SDK's default retry gets it", async () => {
    const gw = await gateway();
    gw.mock.reply({ reply: { error: { status: 503 } }, times: 1 });
    const message = await anthropic(gw, { maxRetries: 2 }).messages.create({
      model: "mock-gpt",
      max_tokens: 50,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(message.stop_reason).toBe("end_turn");
    expect((await gw.listRequests({ limit: 3 })).map((r) => r.status)).toEqual([200, 503]);
  });

  it("a bad rule given to gateway.mock.reply is a ConfigError naming its field", async () => {
    const gw = await gateway();
    const bad = () => gw.mock.reply({ user_txt: "hi" } as never, { text: "x" });
    expect(bad).toThrow(ConfigError);
    expect(bad).toThrow(/match: Unrecognized key: "user_txt"/);
    expect(() =>
      gw.mock.reply({}, { tool_calls: [{ name: "f", arguments: "[1]" }] }, { times: 1 }),
    ).toThrow(/reply\.tool_calls\[0\]\.arguments: must be an object/);
  });
});

// ---- errors as the SDKs raise them -------------------------------------------------------

describe("errors on demand, as the official SDKs raise them", () => {
  it("each: the SDK's error class, status, code or type, and the request id the gateway logged", async () => {
    const gw = await gateway({
      extraRoutes: [
        {
          method: "GET",
          path: "/v1/boom",
          access: "key",
          errors: "chat",
          handler: () => {
            throw new Error("a bug");
          },
        },
      ],
    });
    const oa = openai(gw);
    const an = anthropic(gw);
    const poorOa = new OpenAI({ apiKey: POOR_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const poorAn = new Anthropic({ apiKey: POOR_KEY, baseURL: gw.url, maxRetries: 0 });
    /** `call`, after a rule that fails the next request upstream with `status`. */
    const failing =
      <T>(status: number, call: () => Promise<T>, reason?: "context_length_exceeded") =>
      () => {
        gw.mock.reply({ reply: { error: { status, reason } }, times: 1 });
        return call();
      };
    const create = (model = "mock-gpt") =>
      oa.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] });
    const message = (client = an, model = "mock-gpt") =>
      client.messages.create({
        model,
        max_tokens: 20,
        messages: [{ role: "user", content: "hi" }],
      });
    /** An Anthropic SDK error's status and its body's error type. */
    const typed = (status: number, type: string) => ({ status, error: { error: { type } } });
    const cases: [string, () => Promise<unknown>, unknown, object][] = [
      [
        "bad_request",
        () => oa.chat.completions.create({ model: "mock-gpt", messages: [] }),
        OpenAI.BadRequestError,
        { code: "bad_request" },
      ],
      ["model", () => create("nope"), OpenAI.BadRequestError, { code: "model_not_found" }],
      [
        "402",
        () => poorOa.chat.completions.create(chat() as never),
        OpenAI.APIError,
        { status: 402, code: "insufficient_balance" },
      ],
      ["403", () => create("mock-pro"), OpenAI.PermissionDeniedError, { code: "subscribers_only" }],
      ["429", failing(429, create), OpenAI.RateLimitError, { code: "upstream_error" }],
      [
        "context",
        failing(400, create, "context_length_exceeded"),
        OpenAI.BadRequestError,
        { code: "context_length_exceeded" },
      ],
      ["503", failing(503, create), OpenAI.InternalServerError, { status: 503 }],
      ["500", () => oa.get("/boom"), OpenAI.InternalServerError, { code: "internal_error" }],
      ["an 402", () => message(poorAn), Anthropic.APIError, typed(402, "payment_required")],
      [
        "an 403",
        () => message(an, "mock-pro"),
        Anthropic.PermissionDeniedError,
        typed(403, "permission_error"),
      ],
      ["an 429", failing(429, message), Anthropic.RateLimitError, typed(429, "rate_limit_error")],
      ["an 503", failing(503, message), Anthropic.InternalServerError, typed(503, "api_error")],
    ];
    for (const [name, call, kind, fields] of cases) {
      const err = (await call().then(
        () => undefined,
        (e: unknown) => e,
      )) as { requestID?: string | null };
      expect(err, name).toBeInstanceOf(kind as typeof Error);
      expect(err, name).toMatchObject(fields);
      expect(err.requestID, name).toMatch(/^req_/);
      // An admitted request's id is its row in the kit's log.
      if (["429", "context", "503", "an 429", "an 503"].includes(name)) {
        const [row] = await gw.listRequests({ limit: 1 });
        expect(row.id, name).toBe(err.requestID);
      }
    }
  });
});

describe("the kit's list while the app makes requests at once", () => {
  for (const backend of ["sqlite", "postgres"] as const) {
    it(`lists them in the order they finished, as documented (${backend})`, async () => {
      const gw = await gateway({ db: await databaseOf(backend) });
      // The first is admitted first and finishes last: its client reads it to the end later.
      let release = () => {};
      const first = new Promise<void>((resolve, reject) => {
        const req = request(`${gw.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        });
        req.on("response", (res) =>
          res.once("data", () => {
            res.pause();
            release = () => {
              res.on("end", resolve).resume();
            };
          }),
        );
        req.on("error", reject);
        req.end(JSON.stringify(chat("[[mock:words=100000]] first", "mock-gpt", { stream: true })));
      });
      expect(await eventually(async () => (await holdsInFlight(gw)) === 1)).toBe(true);
      const second = await openai(gw).chat.completions.create({
        model: "mock-gpt",
        messages: [{ role: "user", content: "second" }],
      });
      release();
      await first;
      const [finishedLast, finishedFirst] = await gw.listRequests({ limit: 2 });
      expect(finishedFirst.id).toBe(second._request_id);
      expect(finishedLast.stream).toBe(true);
      expect(Date.parse(finishedLast.time)).toBeLessThanOrEqual(Date.parse(finishedFirst.time));
    });
  }
});

// ---- charges, through the kit and through /v1/usage --------------------------------------

describe("what the kit lists and what /v1/usage reports", () => {
  for (const backend of ["sqlite", "postgres"] as const) {
    it(`agree request by request, in total, and with the balance (${backend})`, async () => {
      const gw = await gateway({ db: await databaseOf(backend) });
      const before = await money(gw);
      const oa = openai(gw);
      await oa.chat.completions.create({
        model: "mock-gpt",
        messages: [{ role: "user", content: "hello" }],
      });
      const stream = await oa.chat.completions.create({
        model: "mock-gpt",
        stream: true,
        messages: [{ role: "user", content: "[[mock:words=300]] go" }],
      });
      for await (const _ of stream);
      gw.mock.reply({ reply: { text: "scripted", usage: { input_tokens: 40, output_tokens: 9 } } });
      await anthropic(gw).messages.create({
        model: "mock-gpt",
        max_tokens: 50,
        messages: [{ role: "user", content: "x" }],
      });
      await oa.responses.create({ model: "mock-gpt", input: "x" });
      gw.mock.reset();
      gw.mock.reply({ reply: { text: "a b c d e f g", break_after: 2 }, times: 1 });
      const broken = await oa.chat.completions.create({
        model: "mock-gpt",
        stream: true,
        messages: [{ role: "user", content: "x" }],
      });
      await (async () => {
        for await (const _ of broken);
      })().catch(() => {});
      await oa.chat.completions.create({
        model: "mock-gpt:free",
        messages: [{ role: "user", content: "x" }],
      });

      const listed = await gw.listRequests();
      const usage = (await (
        await fetch(`${gw.url}/v1/usage/requests?limit=100`, {
          headers: { authorization: `Bearer ${KEY}` },
        })
      ).json()) as {
        data: {
          id: string;
          endpoint: string;
          status: number;
          error_code: string | null;
          stream: boolean;
          input_tokens: number;
          output_tokens: number;
          cost_idr: number;
        }[];
      };
      const summary = (await (
        await fetch(`${gw.url}/v1/usage/summary?days=1`, {
          headers: { authorization: `Bearer ${KEY}` },
        })
      ).json()) as {
        requests: number;
        input_tokens: number;
        output_tokens: number;
        cost_idr: number;
      };
      expect(listed).toHaveLength(6);
      const byId = new Map(usage.data.map((row) => [row.id, row]));
      for (const row of listed) {
        expect(byId.get(row.id), row.id).toEqual(
          expect.objectContaining({
            endpoint: row.endpoint,
            status: row.status,
            error_code: row.error_code,
            stream: row.stream,
            input_tokens: row.usage.input_tokens,
            output_tokens: row.usage.output_tokens,
            cost_idr: row.cost_idr,
          }),
        );
      }
      const charged = listed.reduce((sum, row) => sum + row.cost_micro, 0);
      expect(charged).toBeGreaterThan(0);
      expect(before.balance - (await money(gw)).balance).toBe(charged);
      expect(Math.round(summary.cost_idr * 1e6)).toBe(charged);
      expect(summary.requests).toBe(listed.length);
      expect(summary.input_tokens).toBe(listed.reduce((s, r) => s + r.usage.input_tokens, 0));
      expect(summary.output_tokens).toBe(listed.reduce((s, r) => s + r.usage.output_tokens, 0));
    });
  }
});
