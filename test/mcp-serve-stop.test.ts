import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { startGateway } from "../src/server/gateway.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { idleMoney, quota } from "./support/api.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  type Handler,
  openaiJson,
  sleep,
} from "./support/fake-upstream.js";
import { type BackendName, backends, baseConfigWith, KEY, testGateway } from "./support/gateway.js";
import { mcpClient } from "./support/mcp.js";
import { createTestDatabase } from "./support/postgres.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * MCP tool calls in flight when the gateway stops, on both backends: `gateway serve` (a real
 * process) given SIGTERM lets a call finish within its drain and answers it; a call still running
 * when the drain's bound passes, or a second signal comes, or `close()` is called, is answered
 * the shutting-down error and charged nothing; a cancellation the client sends during the drain
 * reaches the call and ends it. Each call has one row in the request log, with its code.
 */

/** Longer than any test waits: a held call that is never released ends by being cut. */
const HOLD_BOUND_MS = 30_000;
/** How long a test waits for the process to exit once nothing should hold it. */
const EXIT_WITHIN_MS = 20_000;
const NO_BOUND = ["--drain-timeout-ms", "600000"];

let upstream: FakeUpstream;
let release = deferred();
let dir: string;
const clients: Client[] = [];
const serves: ServeProcess[] = [];

/** The provider: a prompt with "hold" waits for the test's release; any other is answered. */
const holding: Handler = async (req) => {
  if (JSON.stringify(req.body.messages ?? "").includes("hold"))
    await Promise.race([release.promise, sleep(HOLD_BOUND_MS)]);
  return openaiJson("the held answer", { usage: [11, 7] });
};

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "held", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-held-pool"] },
      // Its images take longer than any test waits: a call to it ends only by being cut.
      { id: "slow-media", wire: "mock", mock: { latency_ms: 60_000 } },
    ],
    models: [
      {
        name: "held-gpt",
        provider: "held",
        upstream_model: "held-upstream",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      },
      { name: "slow-image", provider: "slow-media", modality: "image", price_per_unit: 500 },
    ],
  });
}

beforeAll(async () => {
  upstream = await fakeUpstream("openai", holding);
  dir = mkdtempSync(join(tmpdir(), "mcp-serve-stop-"));
  // Every gateway on a Postgres database opens the BYOK credentials with the same key.
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
});
afterEach(async () => {
  release.resolve();
  release = deferred();
  upstream.reset(holding);
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  for (const serve of serves.splice(0)) await serve.stop("SIGKILL");
});
afterAll(async () => {
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

let made = 0;

/** A database of the backend's: a SQLite file of its own, or a fresh Postgres database. */
async function database(backend: BackendName): Promise<string> {
  return backend === "sqlite" ? join(dir, `gateway-${++made}.db`) : createTestDatabase();
}

async function serve(backend: BackendName, flags: string[]) {
  const db = await database(backend);
  const configFile = join(dir, `config-${++made}.json`);
  writeFileSync(configFile, JSON.stringify(config()));
  const process_ = await serveProcess(
    ["--db", db, "--config", configFile, "--keepalive-ms", "50", ...flags],
    { [secretKeyEnv]: process.env[secretKeyEnv] },
  );
  serves.push(process_);
  return { serve: process_, db };
}

/** What the database holds once its gateway is gone: the request log and the account's money. */
async function afterwards(db: string) {
  const gateway = await startGateway({ db, config: config() });
  try {
    return { rows: await gateway.listRequests(), money: await idleMoney(gateway) };
  } finally {
    await gateway.close();
  }
}

async function connect(url: string): Promise<Client> {
  const { client } = await mcpClient(url, KEY, "serve-stop");
  clients.push(client);
  return client;
}

type Outcome = { result: { content: { type: string; text?: string }[] } } | { error: unknown };

function heldChat(client: Client, signal?: AbortSignal): Promise<Outcome> {
  return client
    .callTool(
      { name: "chat", arguments: { model: "held-gpt", prompt: "hold on" } },
      undefined,
      signal && { signal },
    )
    .then(
      (result) => ({ result: result as { content: { type: string; text?: string }[] } }),
      (error: unknown) => ({ error }),
    );
}

function slowImage(client: Client): Promise<Outcome> {
  return client
    .callTool({
      name: "generate_image",
      arguments: { model: "slow-image", prompt: "a lighthouse", size: "256x256" },
    })
    .then(
      (result) => ({ result: result as { content: { type: string; text?: string }[] } }),
      (error: unknown) => ({ error }),
    );
}

/** Both calls admitted: the chat reached its provider and both holds are on the balance. */
async function bothAdmitted(url: string): Promise<void> {
  for (let i = 0; i < 500 && upstream.requests.length === 0; i++) await sleep(10);
  expect(upstream.requests).toHaveLength(1);
  // The image's price and the chat's worst case.
  for (let i = 0; i < 500 && (await quota({ url })).held_idr <= 500; i++) await sleep(10);
  expect((await quota({ url })).held_idr).toBeGreaterThan(500);
}

async function stopping(serve: ServeProcess, calls: number): Promise<void> {
  const said = calls === 1 ? "the request" : `${calls} requests`;
  for (let i = 0; i < 1000 && !serve.stderr().includes(`finishing ${said}`); i++) await sleep(10);
  expect(serve.stderr()).toContain(`stopping: finishing ${said} in flight`);
}

async function exitCode(serve: ServeProcess): Promise<number | null | "still running"> {
  const { child } = serve;
  if (child.exitCode !== null) return child.exitCode;
  return Promise.race([
    once(child, "exit").then(([code]) => code as number | null),
    sleep(EXIT_WITHIN_MS).then(() => "still running" as const),
  ]);
}

/** The call was answered the gateway's shutting-down error, not left to the client's timeout. */
function expectShuttingDown(outcome: Outcome): void {
  expect("error" in outcome && outcome.error).toBeInstanceOf(McpError);
  const error = (outcome as { error: McpError }).error;
  expect(error.code).toBe(ErrorCode.ConnectionClosed);
  expect(error.message).toMatch(/The gateway is shutting down/);
}

describe.each(backends)("MCP calls in flight when gateway serve stops (%s)", (backend) => {
  it("a chat call released during the drain is answered and charged once; an image call still running at the drain's bound is answered the shutting-down error and charged nothing", async () => {
    const { serve: gw, db } = await serve(backend, ["--drain-timeout-ms", "3000"]);
    const before = await idleMoney(gw);
    const client = await connect(gw.url);
    const chat = heldChat(client);
    const image = slowImage(client);
    await bothAdmitted(gw.url);

    gw.child.kill("SIGTERM");
    await stopping(gw, 2);
    release.resolve();
    const answered = await chat;
    expect(answered).toMatchObject({ result: { content: [{ text: "the held answer" }] } });
    expectShuttingDown(await image);
    expect(await exitCode(gw)).toBe(0);

    const { rows, money } = await afterwards(db);
    expect(rows.map((r) => [r.endpoint, r.status, r.error_code, r.via]).sort()).toEqual([
      ["chat.completions", 200, null, "mcp"],
      ["images.generations", 499, "client_closed", "mcp"],
    ]);
    const charged = rows.find((r) => r.endpoint === "chat.completions")!.cost_micro;
    expect(charged).toBeGreaterThan(0);
    expect(rows.find((r) => r.endpoint === "images.generations")!.cost_micro).toBe(0);
    expect(money).toEqual({ balance: before.balance - charged, held: 0 });
  }, 60_000);

  it("a second SIGTERM during the drain ends both calls at once with the shutting-down error, each charged nothing", async () => {
    const { serve: gw, db } = await serve(backend, NO_BOUND);
    const before = await idleMoney(gw);
    const client = await connect(gw.url);
    const chat = heldChat(client);
    const image = slowImage(client);
    await bothAdmitted(gw.url);

    gw.child.kill("SIGTERM");
    await stopping(gw, 2);
    gw.child.kill("SIGTERM");
    expectShuttingDown(await chat);
    expectShuttingDown(await image);
    expect(await exitCode(gw)).toBe(0);

    const { rows, money } = await afterwards(db);
    expect(rows.map((r) => [r.endpoint, r.status, r.error_code, r.cost_micro]).sort()).toEqual([
      ["chat.completions", 499, "client_closed", 0],
      ["images.generations", 499, "client_closed", 0],
    ]);
    expect(money).toEqual(before);
  }, 60_000);

  it("a cancellation sent during the drain reaches the call: it ends client_closed, charged nothing, and the process exits without waiting for it; new work is refused meanwhile", async () => {
    const { serve: gw, db } = await serve(backend, NO_BOUND);
    const before = await idleMoney(gw);
    const client = await connect(gw.url);
    const other = await connect(gw.url);
    const abort = new AbortController();
    const chat = heldChat(client, abort.signal);
    for (let i = 0; i < 500 && upstream.requests.length === 0; i++) await sleep(10);
    expect(upstream.requests).toHaveLength(1);

    gw.child.kill("SIGTERM");
    await stopping(gw, 1);
    // A call sent while the gateway drains is not run (its provider is never asked, below).
    expect("error" in (await heldChat(other))).toBe(true);
    abort.abort("the user pressed Esc");
    expect("error" in (await chat)).toBe(true);
    // The provider's call was cut, not left to run for nobody until the drain's end.
    for (let i = 0; i < 500 && upstream.aborted === 0; i++) await sleep(10);
    expect(upstream.aborted).toBe(1);
    expect(await exitCode(gw)).toBe(0);

    const { rows, money } = await afterwards(db);
    expect(upstream.requests).toHaveLength(1);
    expect(rows.map((r) => [r.endpoint, r.status, r.error_code, r.cost_micro, r.via])).toEqual([
      ["chat.completions", 499, "client_closed", 0, "mcp"],
    ]);
    expect(money).toEqual(before);
  }, 60_000);
});

describe("MCP calls in flight when startGateway().close() is called on Postgres", () => {
  it("are answered the shutting-down error at once, each with one row client_closed, charged nothing", async () => {
    const db = await database("postgres");
    const gw = await testGateway({ db, keepaliveMs: 50, config: config() });
    let closed = false;
    try {
      const before = await idleMoney(gw);
      const client = await connect(gw.url);
      const chat = heldChat(client);
      const image = slowImage(client);
      await bothAdmitted(gw.url);
      await gw.close();
      closed = true;
      expectShuttingDown(await chat);
      expectShuttingDown(await image);
      const { rows, money } = await afterwards(db);
      expect(rows.map((r) => [r.endpoint, r.status, r.error_code, r.cost_micro]).sort()).toEqual([
        ["chat.completions", 499, "client_closed", 0],
        ["images.generations", 499, "client_closed", 0],
      ]);
      expect(money).toEqual(before);
    } finally {
      if (!closed) await gw.close();
    }
  }, 60_000);
});
