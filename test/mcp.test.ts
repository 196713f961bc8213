import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ErrorCode, LATEST_PROTOCOL_VERSION, McpError } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { startGateway } from "../src/server/gateway.js";
import type { FinishedRequest } from "../src/server/http/request-trace.js";
import { readWavInfo } from "../src/server/media/wav.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { admin, quota } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import {
  baseConfigWith,
  chat,
  KEY,
  KEY2,
  POOR_KEY,
  post,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { mcpClient, mcpResponse } from "./support/mcp.js";
import { createTestDatabase } from "./support/postgres.js";

const IMAGE_PRICE = 500;
const SPEECH_PRICE = 2;
const TRANSCRIPTION_PRICE = 10;
const MUSIC_PRICE = 30;
const VIDEO_PRICE = 40;

/** The base config with a model of every modality, music and video on jobs that take an hour. */
function mcpConfig(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "mock-hour", wire: "mock", mock: { job_seconds: 3600 } }],
    models: [
      { name: "mock-tts", provider: "mock", modality: "speech", price_per_unit: SPEECH_PRICE },
      {
        name: "mock-stt",
        provider: "mock",
        modality: "transcription",
        price_per_unit: TRANSCRIPTION_PRICE,
      },
      { name: "hour-music", provider: "mock-hour", modality: "music", price_per_unit: MUSIC_PRICE },
      { name: "hour-video", provider: "mock-hour", modality: "video", price_per_unit: VIDEO_PRICE },
    ],
  });
}

const toolNames = [
  "list_models",
  "get_quota",
  "chat",
  "generate_image",
  "generate_speech",
  "transcribe_audio",
  "generate_music",
  "generate_video",
  "get_job",
  "list_jobs",
];

let gw: TestGateway | undefined;
const clients: Client[] = [];

afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
  await gw?.close();
  gw = undefined;
});

async function connect(
  key = KEY,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const connected = await mcpClient(gw!.url, key, "mcp-test");
  clients.push(connected.client);
  return connected;
}

interface Content {
  type: string;
  text?: string;
  data?: string;
  mimeType?: string;
  uri?: string;
}

interface CallResult {
  content: Content[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
}

async function call(client: Client, name: string, args: Record<string, unknown> = {}) {
  return (await client.callTool({ name, arguments: args })) as CallResult;
}

/** IDR as the integer micro-IDR the gateway counts in. */
const micro = (idr: number) => Math.round(idr * 1_000_000);

const textOf = (result: CallResult) =>
  result.content
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");

/** One JSON-RPC message POSTed to /mcp as a client would, without the SDK. */
function rawMcp(key: string | undefined, body: unknown): Promise<Response> {
  return fetch(`${gw!.url}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(key ? { authorization: `Bearer ${key}` } : {}),
    },
    body: JSON.stringify(body),
  });
}

const listTools = { jsonrpc: "2.0", id: 1, method: "tools/list", params: {} };

/** The PNG's width and height from its IHDR chunk, after checking the signature. */
function pngSize(png: Buffer): { width: number; height: number } {
  expect(png.subarray(0, 8)).toEqual(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]));
  expect(png.subarray(12, 16).toString("latin1")).toBe("IHDR");
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

async function recent(key = KEY): Promise<{ endpoint: string; via?: string; cost_idr: number }[]> {
  const res = await fetch(`${gw!.url}/v1/usage/requests?limit=5`, {
    headers: { authorization: `Bearer ${key}` },
  });
  return ((await res.json()) as { data: { endpoint: string; via?: string; cost_idr: number }[] })
    .data;
}

describe("the MCP server at /mcp, with the official SDK client over Streamable HTTP", () => {
  it("initializes on a current protocol version and lists exactly the gateway's tools", async () => {
    gw = await testGateway({ config: mcpConfig() });
    const { client, transport } = await connect();
    expect(client.getServerVersion()?.name).toBe("model-gateway");
    const packageJson = new URL("../package.json", import.meta.url);
    expect(client.getServerVersion()?.version).toBe(
      (JSON.parse(readFileSync(packageJson, "utf8")) as { version: string }).version,
    );
    expect(client.getServerCapabilities()?.tools).toBeDefined();
    expect(transport.protocolVersion).toBe(LATEST_PROTOCOL_VERSION);
    expect(transport.protocolVersion! >= "2025-06-18").toBe(true);
    expect(client.getInstructions()).toMatch(/list_models/);

    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...toolNames].sort());
    for (const tool of tools) {
      expect(tool.description!.length).toBeGreaterThan(40);
      expect(tool.inputSchema.type).toBe("object");
    }
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect(byName.get("chat")!.inputSchema.required).toEqual(["model"]);
    expect(byName.get("generate_image")!.inputSchema.required).toEqual(["model", "prompt"]);
    expect(byName.get("transcribe_audio")!.inputSchema.required).toEqual(["model", "audio"]);
    expect(byName.get("get_job")!.inputSchema.required).toEqual(["id"]);
    // The job, or the refusal's `error` (an SDK client checks an error's structured content too).
    const musicOutput = byName.get("generate_music")!.outputSchema as {
      anyOf?: { required?: string[] }[];
    };
    expect(musicOutput.anyOf?.map((shape) => shape.required)).toEqual([
      ["id", "status"],
      ["error"],
    ]);
  });

  it("list_models and get_quota show what /v1/models and /v1/account/quota show", async () => {
    gw = await testGateway({ config: mcpConfig() });
    const { client } = await connect();
    const models = await call(client, "list_models");
    expect(models.isError).toBeFalsy();
    const listed = (models.structuredContent!.models as { id: string }[]).map((m) => m.id);
    const v1 = (await (await fetch(`${gw.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(listed).toEqual(v1.data.map((m) => m.id));
    expect(textOf(models)).toMatch(/^mock-image - image \(500 IDR per unit\)$/m);
    const images = await call(client, "list_models", { modality: "image" });
    expect(textOf(images)).toContain("mock-image");
    expect(textOf(images)).not.toMatch(/^mock-gpt /m);

    const read = await call(client, "get_quota");
    expect(read.isError).toBeFalsy();
    expect(read.structuredContent).toEqual(await quota(gw));
  });

  it("chat answers as its /v1 twin does, costs exactly its price, and is logged as from MCP", async () => {
    const finished: FinishedRequest[] = [];
    gw = await testGateway({ config: mcpConfig(), onRequest: (r) => finished.push(r) });
    const { client } = await connect();
    const twin = await post(gw, "/v1/chat/completions", chat("Review this function", "mock-gpt"));
    const twinText = ((await twin.json()) as { choices: { message: { content: string } }[] })
      .choices[0].message.content;
    const afterTwin = (await quota(gw)).balance_idr;
    const [twinLogged] = await recent();
    expect(twinLogged.via).toBeUndefined();
    expect(twinLogged.cost_idr).toBeGreaterThan(0);

    const mark = finished.length;
    const result = await call(client, "chat", {
      model: "mock-gpt",
      prompt: "Review this function",
    });
    expect(result.isError).toBeFalsy();
    expect(textOf(result)).toBe(twinText);
    const afterMcp = (await quota(gw)).balance_idr;
    expect(micro(afterTwin) - micro(afterMcp)).toBe(micro(twinLogged.cost_idr));
    const [logged] = await recent();
    expect(logged).toMatchObject({ endpoint: "chat.completions", via: "mcp" });
    expect(logged.cost_idr).toBe(twinLogged.cost_idr);
    const inspected = (await gw.listRequests({ limit: 1 }))[0];
    expect(inspected).toMatchObject({ endpoint: "chat.completions", via: "mcp" });
    expect(inspected.key.label).toBe("main");
    // The serve lines: the /mcp request, and the /v1 request its tool call was served as.
    const served = finished
      .slice(mark)
      .filter((r) => r.method === "POST")
      .map((r) => [r.method, r.path, r.via, r.keyLabel]);
    expect(served).toEqual([
      ["POST", "/v1/chat/completions", "mcp", "main"],
      ["POST", "/mcp", undefined, "main"],
    ]);

    // A conversation and an output limit pass through as the /v1 body would carry them.
    const conversation = await call(client, "chat", {
      model: "mock-gpt",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Review this function" },
      ],
      max_tokens: 5,
    });
    expect(conversation.isError).toBeFalsy();
    expect(textOf(conversation).length).toBeGreaterThan(0);
  });

  it("generate_image returns a real PNG and a link to the stored file, at the image price", async () => {
    gw = await testGateway({ config: mcpConfig() });
    const { client } = await connect();
    const before = (await quota(gw)).balance_idr;
    const result = await call(client, "generate_image", {
      model: "mock-image",
      prompt: "a lighthouse at dusk",
      size: "64x48",
    });
    expect(result.isError).toBeFalsy();
    const image = result.content.find((c) => c.type === "image")!;
    expect(image.mimeType).toBe("image/png");
    const png = Buffer.from(image.data!, "base64");
    expect(pngSize(png)).toEqual({ width: 64, height: 48 });
    const link = result.content.find((c) => c.type === "resource_link")!;
    expect(link.uri).toMatch(new RegExp(`^${gw.url}/v1/files/file_`));
    const stored = await fetch(link.uri!, { headers: { authorization: `Bearer ${KEY}` } });
    expect(Buffer.from(await stored.arrayBuffer())).toEqual(png);
    expect(micro(before) - micro((await quota(gw)).balance_idr)).toBe(micro(IMAGE_PRICE));
    expect((await recent())[0]).toMatchObject({ endpoint: "images.generations", via: "mcp" });
  });

  it("generate_speech returns real audio that transcribe_audio hears back word for word", async () => {
    gw = await testGateway({ config: mcpConfig() });
    const { client } = await connect();
    const words = "the gateway speaks through its own tools";
    const before = (await quota(gw)).balance_idr;
    const speech = await call(client, "generate_speech", { model: "mock-tts", input: words });
    expect(speech.isError).toBeFalsy();
    const audio = speech.content.find((c) => c.type === "audio")!;
    expect(audio.mimeType).toBe("audio/wav");
    const wav = Buffer.from(audio.data!, "base64");
    const seconds = readWavInfo(wav)!.durationSeconds;
    expect(seconds).toBeGreaterThan(0);
    expect(micro(before) - micro((await quota(gw)).balance_idr)).toBe(
      micro(SPEECH_PRICE * [...words].length),
    );

    const heard = await call(client, "transcribe_audio", {
      model: "mock-stt",
      audio: audio.data,
      filename: "speech.wav",
    });
    expect(heard.isError).toBeFalsy();
    expect(textOf(heard)).toBe(words);
    expect((await recent())[0]).toMatchObject({ endpoint: "audio.transcriptions", via: "mcp" });
    expect((await recent())[0].cost_idr).toBe(
      TRANSCRIPTION_PRICE * Math.max(1, Math.ceil(seconds)),
    );
  });

  it("chat tool calls on a free model, awaited one by one under the test kit's clock, do not hang on burst spacing", async () => {
    const config = { ...mcpConfig(), tiers: { free: { free_rpm: 20, free_daily: 50 } } };
    gw = await testGateway({
      config,
      clock: "manual",
      now: () => Date.parse("2030-01-01T10:00:00Z"),
    });
    const { client } = await connect();
    const ask = () => call(client, "chat", { model: "mock-gpt:free", prompt: "hi" });
    expect((await ask()).isError).toBeFalsy();
    // The /mcp request waits on its /v1 twin, which waits on its burst slot: the clock jumps it.
    expect((await ask()).isError).toBeFalsy();
    expect(gw.clock.now()).toBe(Date.parse("2030-01-01T10:00:00.200Z"));
  });

  it("a music job is polled with get_job to completion under the test kit's clock", async () => {
    gw = await testGateway({ config: mcpConfig(), clock: "manual" });
    const { client } = await connect();
    const started = await call(client, "generate_music", {
      model: "hour-music",
      prompt: "a calm piano loop",
      duration: 3,
    });
    expect(started.isError).toBeFalsy();
    const job = started.structuredContent as { id: string; status: string };
    expect(Object.keys(job).sort()).toEqual(["id", "status"]);
    expect(job.status).toBe("queued");
    expect(JSON.parse(textOf(started).split("\n")[0]!)).toEqual(job);

    const status = async () =>
      (await call(client, "get_job", { id: job.id })).structuredContent!.status;
    const until = async (want: string) => {
      for (let i = 0; i < 200 && (await status()) !== want; i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(await status()).toBe(want);
    };
    await until("running");
    gw.clock.advance(3_600_000);
    await until("completed");
    const done = await call(client, "get_job", { id: job.id });
    expect(done.structuredContent).toMatchObject({ id: job.id, status: "completed" });
    const audio = done.content.find((c) => c.type === "audio")!;
    expect(readWavInfo(Buffer.from(audio.data!, "base64"))!.durationSeconds).toBeCloseTo(3, 1);
    const link = done.content.find((c) => c.type === "resource_link")!;
    expect(link.uri).toBe(`${gw.url}/v1/music/generations/${job.id}/content`);
    const logged = (await recent()).find((r) => r.endpoint === "music.generations")!;
    expect(logged).toMatchObject({ via: "mcp", cost_idr: 3 * MUSIC_PRICE });

    const video = await call(client, "generate_video", { model: "hour-video", prompt: "waves" });
    expect(video.structuredContent).toMatchObject({ status: "queued" });
    const polled = await call(client, "get_job", { id: video.structuredContent!.id as string });
    expect(polled.isError).toBeFalsy();
  });

  it("refusals are tool errors naming the spec's code, with Retry-After seconds where /v1 sends them", async () => {
    gw = await testGateway({ config: mcpConfig(), clock: "manual" });
    const poor = (await connect(POOR_KEY)).client;
    const broke = await call(poor, "chat", { model: "mock-gpt", prompt: "hi" });
    expect(broke.isError).toBe(true);
    expect(textOf(broke)).toMatch(/^insufficient_balance: .+ \(HTTP 402, request req_[\w-]+\)$/);

    const { client } = await connect();
    const members = await call(client, "chat", { model: "mock-pro", prompt: "hi" });
    expect(members.isError).toBe(true);
    expect(textOf(members)).toMatch(/^subscribers_only: /);

    const shared = (await connect(SHARED_KEY)).client;
    const quotaRead = await call(shared, "get_quota");
    expect(quotaRead.isError).toBe(true);
    expect(textOf(quotaRead)).toMatch(
      /^shared_key_not_allowed: .+ \(HTTP 403, request req_[\w-]+\)$/,
    );

    // The third concurrent music job: /v1 answers 429 with Retry-After 60.
    for (const n of [1, 2]) {
      const ok = await call(client, "generate_music", { model: "hour-music", prompt: `song ${n}` });
      expect(ok.isError).toBeFalsy();
    }
    const third = await call(client, "generate_music", { model: "hour-music", prompt: "song 3" });
    expect(third.isError).toBe(true);
    expect(textOf(third)).toMatch(/^rate_limit_exceeded: .+ Retry after 60 seconds\.$/);
    expect(third.structuredContent).toMatchObject({
      error: { code: "rate_limit_exceeded", status: 429, retry_after_seconds: 60 },
    });

    const unknownJob = await call(client, "get_job", { id: "music_nope" });
    expect(unknownJob.isError).toBe(true);
    expect(textOf(unknownJob)).toMatch(/^not_found: /);
  });

  it("an unknown tool and arguments that break a tool's schema are protocol errors", async () => {
    gw = await testGateway({ config: mcpConfig() });
    const { client } = await connect();
    const invalid = (name: string, args: Record<string, unknown>) =>
      client.callTool({ name, arguments: args }).then(
        () => undefined,
        (err: unknown) => err,
      );
    for (const [name, args] of [
      ["make_coffee", {}],
      ["chat", { prompt: "no model" }],
      ["chat", { model: "mock-gpt" }],
      ["chat", { model: "mock-gpt", prompt: "both", messages: [{ role: "user", content: "x" }] }],
      ["chat", { model: "mock-gpt", system: "x", messages: [{ role: "user", content: "x" }] }],
      ["transcribe_audio", { model: "mock-stt", audio: "not base64!" }],
      ["generate_image", { model: "mock-image", prompt: "x", size: "huge" }],
    ] as const) {
      const err = await invalid(name, args);
      expect(err, name).toBeInstanceOf(McpError);
      expect((err as McpError).code).toBe(ErrorCode.InvalidParams);
    }
    // Nothing was admitted for them.
    expect(await recent()).toEqual([]);

    // A body that is no JSON-RPC message is the transport's 4xx in JSON-RPC's shape, never a 500.
    for (const [body, accept, status, code] of [
      ["not json", "application/json, text/event-stream", 400, ErrorCode.ParseError],
      ['{"jsonrpc":"2.0"}', "application/json, text/event-stream", 400, ErrorCode.ParseError],
      [JSON.stringify(listTools), "application/json", 406, -32000],
    ] as const) {
      const res = await fetch(`${gw.url}/mcp`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", accept },
        body,
      });
      expect(res.status).toBe(status);
      expect(((await res.json()) as { error: { code: number } }).error.code).toBe(code);
    }
  });
});

describe("/mcp authenticates and limits exactly as /v1", () => {
  it("a missing or wrong key is a plain-text 401, and so are a revoked key and a suspended account", async () => {
    gw = await testGateway({ config: mcpConfig() });
    for (const key of [undefined, "kn-not-a-key"]) {
      const res = await rawMcp(key, listTools);
      expect(res.status).toBe(401);
      expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    }
    const { client } = await connect(KEY2);
    expect((await call(client, "list_models")).isError).toBeFalsy();
    expect((await admin(gw, "DELETE", "/keys/k2")).status).toBe(200);
    const revoked = await rawMcp(KEY2, listTools);
    expect(revoked.status).toBe(401);
    expect(await revoked.text()).toMatch(/revoked/);
    await expect(call(client, "list_models")).rejects.toThrow(/API key revoked/);

    expect((await rawMcp(KEY, listTools)).status).toBe(200);
    const withApiKeyHeader = await fetch(`${gw.url}/mcp`, {
      method: "POST",
      headers: {
        "x-api-key": KEY,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body: JSON.stringify(listTools),
    });
    expect(withApiKeyHeader.status).toBe(200);
    expect((await admin(gw, "POST", "/accounts/acct/suspend")).status).toBe(200);
    const suspended = await rawMcp(KEY, listTools);
    expect(suspended.status).toBe(401);
    expect(suspended.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(await suspended.text()).toMatch(/suspended/);
  });

  it("a shared key's 30 requests a minute per address count /v1 and /mcp together, tool calls once", async () => {
    gw = await testGateway({ config: mcpConfig(), clock: "manual" });
    const shared = { authorization: `Bearer ${SHARED_KEY}` };
    for (let i = 0; i < 10; i++) {
      expect((await post(gw, "/v1/chat/completions", chat(`v1 ${i}`), shared)).status).toBe(200);
    }
    for (let i = 0; i < 10; i++) {
      expect((await rawMcp(SHARED_KEY, { ...listTools, id: i })).status).toBe(200);
    }
    for (let i = 0; i < 10; i++) {
      const res = await rawMcp(SHARED_KEY, {
        jsonrpc: "2.0",
        id: 100 + i,
        method: "tools/call",
        params: { name: "chat", arguments: { model: "mock-gpt", prompt: `mcp ${i}` } },
      });
      expect(res.status).toBe(200);
      const answer = await mcpResponse<{ result: CallResult }>(res);
      expect(answer.result.isError).toBeFalsy();
    }
    for (const res of [
      await rawMcp(SHARED_KEY, listTools),
      await post(gw, "/v1/chat/completions", chat("one too many"), shared),
    ]) {
      expect(res.status).toBe(429);
      expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
      expect(await res.text()).toBe("too many requests, try again shortly");
    }
    // Another key is not held back, and the next minute the shared key works again.
    expect((await rawMcp(KEY, listTools)).status).toBe(200);
    gw.clock.advance(60_000);
    expect((await rawMcp(SHARED_KEY, listTools)).status).toBe(200);
  });

  it("GET and DELETE are 405 for a stateless server; a preflight is answered with CORS", async () => {
    gw = await testGateway({ config: mcpConfig() });
    for (const method of ["GET", "DELETE"]) {
      const res = await fetch(`${gw.url}/mcp`, {
        method,
        headers: { authorization: `Bearer ${KEY}`, accept: "text/event-stream" },
      });
      expect(res.status).toBe(405);
      expect(res.headers.get("allow")).toBe("POST, OPTIONS");
    }
    const preflight = await fetch(`${gw.url}/mcp`, {
      method: "OPTIONS",
      headers: {
        origin: "https://inspector.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type, mcp-protocol-version",
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get("access-control-allow-origin")).toBe("*");
    const answered = await rawMcp(KEY, listTools);
    expect(answered.headers.get("access-control-allow-origin")).toBe("*");
  });
});

describe("the owner's dashboard", () => {
  it("shows MCP calls among the recent requests", async () => {
    gw = await testGateway({ config: mcpConfig() });
    const { client } = await connect();
    expect((await call(client, "chat", { model: "mock-gpt", prompt: "hi" })).isError).toBeFalsy();
    const owner = await ownerSession(gw);
    const page = await (
      await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })
    ).text();
    const table = page.slice(page.indexOf('id="recent"'));
    expect(table).toMatch(/chat\.completions · via MCP/);
  });
});

describe("the MCP server on Postgres", () => {
  let savedSecretKey: string | undefined;
  beforeAll(() => {
    savedSecretKey = process.env[secretKeyEnv];
    process.env[secretKeyEnv] = randomBytes(32).toString("base64");
  });
  afterAll(() => {
    if (savedSecretKey === undefined) delete process.env[secretKeyEnv];
    else process.env[secretKeyEnv] = savedSecretKey;
  });

  it("a tool call is its /v1 twin in price and log, and the shared key's address limit spans both", async () => {
    const running = await startGateway({
      db: await createTestDatabase(),
      config: mcpConfig(),
      clock: "manual",
      port: 0,
    });
    gw = running as unknown as TestGateway;
    const { client } = await connect();
    const before = (await quota(running)).balance_idr;
    const image = await call(client, "generate_image", {
      model: "mock-image",
      prompt: "a harbour",
      size: "32x32",
    });
    expect(image.isError).toBeFalsy();
    expect(pngSize(Buffer.from(image.content[0]!.data!, "base64"))).toEqual({
      width: 32,
      height: 32,
    });
    expect(micro(before) - micro((await quota(running)).balance_idr)).toBe(micro(IMAGE_PRICE));
    expect((await recent())[0]).toMatchObject({ endpoint: "images.generations", via: "mcp" });

    const shared = { authorization: `Bearer ${SHARED_KEY}` };
    for (let i = 0; i < 15; i++) {
      expect((await post(running, "/v1/chat/completions", chat(`v1 ${i}`), shared)).status).toBe(
        200,
      );
      expect((await rawMcp(SHARED_KEY, { ...listTools, id: i })).status).toBe(200);
    }
    const refused = await rawMcp(SHARED_KEY, listTools);
    expect(refused.status).toBe(429);
    expect(await refused.text()).toBe("too many requests, try again shortly");
  });
});
