import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  ErrorCode,
  LATEST_PROTOCOL_VERSION,
  ListToolsResultSchema,
  McpError,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { requestIdMeta } from "../src/server/mcp/tools.js";
import { idleMoney, quota } from "./support/api.js";
import {
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  POOR_KEY,
  post,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { mcpClient, mcpResponse, mcpResponses } from "./support/mcp.js";

/**
 * The MCP server at /mcp against an adversarial client: every protocol version the installed SDK
 * knows, JSON-RPC batches, malformed calls, an SDK client that validates structured output, and
 * calls whose client leaves, each metered as its /v1 twin.
 */

let gw: TestGateway | undefined;
const clients: Client[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  await gw?.close();
  gw = undefined;
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The base config with music and video models whose jobs take an hour. */
function jobsConfig(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "mock-hour", wire: "mock", mock: { job_seconds: 3600 } }],
    models: [
      { name: "hour-music", provider: "mock-hour", modality: "music", price_per_unit: 30 },
      { name: "hour-video", provider: "mock-hour", modality: "video", price_per_unit: 40 },
    ],
  });
}

async function connect(
  key = KEY,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const connected = await mcpClient(gw!.url, key, "protocol-hunt");
  clients.push(connected.client);
  return connected;
}

/** A body POSTed to /mcp as a client without the SDK would, with extra headers. */
function rawMcp(body: unknown, headers: Record<string, string> = {}, key = KEY) {
  return fetch(`${gw!.url}/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

interface RpcAnswer {
  id: number | string | null;
  result?: { content: { type: string; text?: string }[]; isError?: boolean } & Record<
    string,
    unknown
  >;
  error?: { code: number; message: string };
}

const chatCall = (id: number | string, prompt: string) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name: "chat", arguments: { model: "mock-gpt", prompt } },
});

/** The rows of the request log, newest first. */
const rows = () => gw!.listRequests({ limit: 100 });

describe("protocol versions", () => {
  it("initialize answers every version the SDK supports with that version, an unknown one with the latest, and no session to take", async () => {
    gw = await testGateway();
    for (const version of [...SUPPORTED_PROTOCOL_VERSIONS, "1999-01-01"]) {
      const res = await rawMcp({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: {
          protocolVersion: version,
          capabilities: {},
          clientInfo: { name: "raw", version: "1" },
        },
      });
      expect(res.status, version).toBe(200);
      // Stateless: no session id is handed out, so none can be used by another key.
      expect(res.headers.get("mcp-session-id"), version).toBeNull();
      const answer = (await res.json()) as { result: { protocolVersion: string } };
      const known = (SUPPORTED_PROTOCOL_VERSIONS as readonly string[]).includes(version);
      expect(answer.result.protocolVersion).toBe(known ? version : LATEST_PROTOCOL_VERSION);

      // Each later request names the version in its header; one the SDK does not know is a 400.
      const listed = await rawMcp(
        { jsonrpc: "2.0", id: 2, method: "tools/list" },
        { "mcp-protocol-version": version },
      );
      expect(listed.status, version).toBe(known ? 200 : 400);
    }
  });
});

describe("the body limit", () => {
  it("is the gateway's, not the SDK transport's own 4 MB: a larger call within it is served, one over it is a 413 with a JSON-RPC error, as the transport answers its own", async () => {
    const limit = 6 * 1024 * 1024;
    gw = await testGateway({ bodyLimitBytes: limit });
    const served = await rawMcp(chatCall(1, "x".repeat(5 * 1024 * 1024)));
    expect(served.status).toBe(200);
    expect((await mcpResponse<RpcAnswer>(served)).result?.isError).toBeFalsy();

    // The shape the SDK's transport gives a body over its own limit: HTTP 413 and a JSON-RPC
    // error (-32000) without an id, whether the body declared its length or came chunked.
    const overBody = JSON.stringify(chatCall(2, "x".repeat(limit)));
    const chunked = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(overBody));
        controller.close();
      },
    });
    for (const [how, body] of [
      ["declared", overBody],
      ["chunked", chunked],
    ] as const) {
      const over = await fetch(`${gw.url}/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${KEY}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
        },
        body,
        duplex: "half",
      } as RequestInit);
      expect(over.status, how).toBe(413);
      expect(over.headers.get("content-type"), how).toMatch(/^application\/json/);
      expect(await over.json(), how).toEqual({
        jsonrpc: "2.0",
        error: { code: -32000, message: "Request body is larger than the limit of 6 MB." },
        id: null,
      });
    }

    // An SDK client's call over the limit fails with the status and that error as its text.
    const { client } = await connect();
    const failed = await client
      .callTool({ name: "chat", arguments: { model: "mock-gpt", prompt: "x".repeat(limit) } })
      .then(
        () => undefined,
        (err: unknown) => err as { code?: number; message: string },
      );
    expect(failed?.code).toBe(413);
    expect(failed?.message).toContain('"code":-32000');
    expect(await rows()).toHaveLength(1);
  });
});

describe("JSON-RPC batches", () => {
  it("are refused from 2025-06-18 on, which has none, and answered for 2025-03-26 clients", async () => {
    gw = await testGateway();
    const batch = [chatCall(1, "first"), chatCall(2, "second")];
    for (const version of ["2025-06-18", LATEST_PROTOCOL_VERSION]) {
      const refused = await rawMcp(batch, { "mcp-protocol-version": version });
      expect(refused.status, version).toBe(400);
      const answer = (await refused.json()) as RpcAnswer;
      expect(answer.error?.code).toBe(ErrorCode.InvalidRequest);
      expect(answer.error?.message).toMatch(/batch/i);
    }
    expect(await rows()).toEqual([]);

    // Without the header the server assumes 2025-03-26, where batches exist.
    for (const headers of [{ "mcp-protocol-version": "2025-03-26" }, {}] as Record<
      string,
      string
    >[]) {
      const answered = await rawMcp(batch, headers);
      expect(answered.status).toBe(200);
      // As SSE (a tool call's answer to a client that takes it), in the order the calls end.
      const answers = (await mcpResponses<RpcAnswer>(answered)).sort(
        (a, b) => Number(a.id) - Number(b.id),
      );
      expect(answers.map((a) => [a.id, a.result?.isError ?? false])).toEqual([
        [1, false],
        [2, false],
      ]);
    }
    expect(await rows()).toHaveLength(4);
  });

  it("two requests of one batch under one id are refused before either runs: nothing is charged without an answer", async () => {
    gw = await testGateway();
    const before = (await quota(gw)).balance_idr;
    const res = await rawMcp([chatCall(7, "one"), chatCall(7, "two")]);
    expect(res.status).toBe(400);
    const answer = (await res.json()) as RpcAnswer;
    expect(answer.error?.code).toBe(ErrorCode.InvalidRequest);
    expect(answer.error?.message).toMatch(/\b7\b/);
    expect(await rows()).toEqual([]);
    expect((await quota(gw)).balance_idr).toBe(before);
    // The same id as a number and as a string are two ids.
    const distinct = await rawMcp([chatCall(7, "one"), chatCall("7", "two")]);
    const ids = (await mcpResponses<RpcAnswer>(distinct)).map((a) => a.id);
    expect(ids).toHaveLength(2);
    expect(ids).toEqual(expect.arrayContaining([7, "7"]));
  });

  it.each(backends)(
    "%s: a shared key's batch counts each of its requests against the address's 30 a minute, with /v1",
    async (backend) => {
      gw = await gatewayOn(backend, { clock: "manual" });
      const shared = { authorization: `Bearer ${SHARED_KEY}` };
      const batchOf = (n: number, from: number) =>
        Array.from({ length: n }, (_, i) => chatCall(from + i, `batch ${from + i}`));

      // 31 calls in one POST are more than the minute allows: refused whole, none of them run.
      const over = await rawMcp(batchOf(31, 0), {}, SHARED_KEY);
      expect(over.status).toBe(429);
      expect(over.headers.get("content-type")).toMatch(/^text\/plain/);
      expect(await over.text()).toBe("too many requests, try again shortly");
      expect(await rows()).toEqual([]);

      // The refused batch counted nothing: 20 in a batch and 10 on /v1 are the minute's 30.
      const twenty = await rawMcp(batchOf(20, 100), {}, SHARED_KEY);
      expect(twenty.status).toBe(200);
      const answers = await mcpResponses<RpcAnswer>(twenty);
      expect(answers.filter((a) => a.result && !a.result.isError)).toHaveLength(20);
      for (let i = 0; i < 10; i++) {
        expect((await post(gw, "/v1/chat/completions", chat(`v1 ${i}`), shared)).status).toBe(200);
      }
      for (const res of [
        await post(gw, "/v1/chat/completions", chat("one too many"), shared),
        await rawMcp(chatCall(999, "one too many"), {}, SHARED_KEY),
        await rawMcp(batchOf(2, 500), {}, SHARED_KEY),
      ]) {
        expect(res.status).toBe(429);
        expect(await res.text()).toBe("too many requests, try again shortly");
      }
      expect(await rows()).toHaveLength(30);
    },
  );

  it.each(backends)(
    "%s: a shared key's POST refused whole (a batch the version has none of, two requests under one id, no JSON-RPC, headers the transport refuses) counts nothing against the address",
    async (backend) => {
      gw = await gatewayOn(backend, { clock: "manual" });
      const batch = [chatCall(1, "one"), chatCall(2, "two")];
      const refusals: [string, () => Promise<Response>, number][] = [
        [
          "a batch sent as 2025-06-18",
          () => rawMcp(batch, { "mcp-protocol-version": "2025-06-18" }, SHARED_KEY),
          400,
        ],
        [
          "two requests under one id",
          () => rawMcp([chatCall(7, "a"), chatCall(7, "b")], {}, SHARED_KEY),
          400,
        ],
        ["no JSON-RPC", () => rawMcp({ id: 1, hello: "there" }, {}, SHARED_KEY), 400],
        [
          "JSON only",
          () => rawMcp(chatCall(3, "c"), { accept: "application/json" }, SHARED_KEY),
          406,
        ],
      ];
      // More refusals than the minute's 30 requests.
      for (let round = 0; round < 9; round++) {
        for (const [what, send, status] of refusals) {
          const res = await send();
          await res.text();
          expect({ what, status: res.status }).toEqual({ what, status });
        }
      }
      expect(await rows()).toEqual([]);
      // The address still has its whole minute: 30 requests, and then the plain 429.
      const listTools = (id: number) => ({ jsonrpc: "2.0", id, method: "tools/list" });
      for (let i = 0; i < 30; i++) {
        const res = await rawMcp(listTools(i), {}, SHARED_KEY);
        expect({ i, status: res.status }).toEqual({ i, status: 200 });
        await res.text();
      }
      const over = await rawMcp(listTools(30), {}, SHARED_KEY);
      expect(over.status).toBe(429);
      expect(await over.text()).toBe("too many requests, try again shortly");
    },
  );
});

describe("tools/call the protocol way", () => {
  it("a call asking to run as a task (2025-11-25) is served as a plain call, as a server without the tasks capability must, and charged once", async () => {
    gw = await testGateway();
    const { client } = await connect();
    expect(client.getServerCapabilities()?.tasks).toBeUndefined();
    const before = await idleMoney(gw);
    const result = await client.request(
      {
        method: "tools/call",
        params: {
          name: "chat",
          arguments: { model: "mock-gpt", prompt: "run me as a task" },
          task: { ttl: 60_000 },
        },
      },
      CallToolResultSchema,
    );
    expect(result.isError).toBeFalsy();
    expect(result.content[0]).toMatchObject({
      type: "text",
      text: expect.stringMatching(/run me as a task/),
    });
    const logged = await rows();
    expect(logged).toHaveLength(1);
    expect(result._meta?.[requestIdMeta]).toBe(logged[0]!.id);
    expect(before.balance - (await idleMoney(gw)).balance).toBe(logged[0]!.cost_micro);
    expect(logged[0]!.cost_micro).toBeGreaterThan(0);
  });

  it("a malformed tools/call is Invalid params (-32602), the client's mistake, not an internal error", async () => {
    gw = await testGateway();
    for (const params of [
      undefined,
      { arguments: { model: "mock-gpt", prompt: "no name" } },
      { name: 5 },
      { name: "chat", arguments: ["model", "mock-gpt"] },
    ]) {
      const res = await rawMcp({ jsonrpc: "2.0", id: 1, method: "tools/call", params });
      expect(res.status).toBe(200);
      const answer = await mcpResponse<RpcAnswer>(res);
      expect(answer.error?.code, JSON.stringify(params)).toBe(ErrorCode.InvalidParams);
    }
    expect(await rows()).toEqual([]);
  });

  it("a tools/list or initialize whose params do not fit is Invalid params (-32602) naming the field, not an internal error, and the rest of a batch is answered", async () => {
    gw = await testGateway();
    const requests = [
      { jsonrpc: "2.0", id: 1, method: "tools/list", params: { cursor: 5 } },
      {
        jsonrpc: "2.0",
        id: 2,
        method: "initialize",
        params: { protocolVersion: 20250618, capabilities: {}, clientInfo: { name: "raw" } },
      },
    ];
    const [listed, initialized] = await Promise.all(
      requests.map(async (request) => {
        const answer = await mcpResponse<RpcAnswer>(await rawMcp(request));
        expect(answer.id).toBe(request.id);
        expect(answer.error?.code, request.method).toBe(ErrorCode.InvalidParams);
        return answer.error;
      }),
    );
    expect(listed?.message).toBe(
      "Invalid params for tools/list: params.cursor: Invalid input: expected string, received number",
    );
    expect(initialized?.message).toMatch(
      /^Invalid params for initialize: params\.protocolVersion: /,
    );

    // In a batch (2025-03-26), the good request beside it is answered as ever.
    const answers = await mcpResponses<RpcAnswer>(
      await rawMcp([requests[0], { jsonrpc: "2.0", id: 3, method: "tools/list" }]),
    );
    expect(answers.find((a) => a.id === 1)?.error?.code).toBe(ErrorCode.InvalidParams);
    expect(answers.find((a) => a.id === 3)?.result?.tools).toHaveLength(10);

    // What an SDK client's request with a bad cursor rejects with.
    const { client } = await connect();
    const refused = await client
      .request(
        { method: "tools/list", params: { cursor: 5 as unknown as string } },
        ListToolsResultSchema,
      )
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as McpError).code).toBe(ErrorCode.InvalidParams);
  });

  it("refusals of the tools with an output schema reach an SDK client that validates structured output", async () => {
    gw = await testGateway({ config: jobsConfig(), clock: "manual" });
    const { client } = await connect();
    // An agent lists the tools first; from then on the SDK checks each structuredContent
    // against the tool's outputSchema.
    const { tools } = await client.listTools();
    const declared = tools.filter((t) => t.outputSchema).map((t) => t.name);
    expect(declared.sort()).toEqual(["generate_music", "generate_video", "get_job", "list_jobs"]);

    const started = await client.callTool({
      name: "generate_video",
      arguments: { model: "hour-video", prompt: "waves" },
    });
    expect(started.isError).toBeFalsy();
    expect(started.structuredContent).toMatchObject({ status: "queued" });

    const polled = await client.callTool({
      name: "get_job",
      arguments: { id: (started.structuredContent as { id: string }).id },
    });
    expect(polled.isError).toBeFalsy();
    for (const n of [1, 2]) {
      const song = await client.callTool({
        name: "generate_music",
        arguments: { model: "hour-music", prompt: `song ${n}` },
      });
      expect(song.isError).toBeFalsy();
    }

    const poor = (await connect(POOR_KEY)).client;
    await poor.listTools();
    for (const [caller, name, args, error] of [
      [
        client,
        "generate_music",
        { model: "hour-music", prompt: "song 3" },
        { code: "rate_limit_exceeded", retry_after_seconds: 60 },
      ],
      [
        poor,
        "generate_music",
        { model: "hour-music", prompt: "x" },
        { code: "insufficient_balance" },
      ],
      [
        client,
        "generate_video",
        { model: "no-such-model", prompt: "x" },
        { code: "model_not_found" },
      ],
      [client, "get_job", { id: "music_nope" }, { code: "not_found" }],
    ] as const) {
      const result = (await caller.callTool({ name, arguments: args })) as {
        isError?: boolean;
        content: { type: string; text?: string }[];
        structuredContent?: { error?: Record<string, unknown> };
      };
      expect(result.isError, name).toBe(true);
      expect(result.content[0]!.text).toMatch(new RegExp(`^${error.code}: `));
      expect(result.structuredContent?.error).toMatchObject(error);
    }
  });
});

describe("a call whose client goes away is metered as its /v1 twin", () => {
  it("closing the transport mid-call and the SDK's own timeout both end the twin client_closed, charged nothing, like /v1", async () => {
    gw = await testGateway();
    const before = await idleMoney(gw);
    const slow = (what: string) => `${what} [[mock:delay=20000]]`;
    const heldSoon = async () => {
      for (let i = 0; i < 500 && (await quota(gw!)).held_idr === 0; i++) await pause(10);
      expect((await quota(gw!)).held_idr).toBeGreaterThan(0);
    };
    const endedRows = async (n: number) => {
      for (let i = 0; i < 500 && (await rows()).length < n; i++) await pause(10);
      return rows();
    };

    // The /v1 twin: a client that leaves a non-stream chat before its answer.
    const leaving = new AbortController();
    const v1 = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      signal: leaving.signal,
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(chat(slow("v1"))),
    }).catch(() => "left");
    await heldSoon();
    leaving.abort();
    expect(await v1).toBe("left");
    const [twin] = await endedRows(1);
    expect(twin).toMatchObject({ error_code: "client_closed", cost_micro: 0 });

    // An agent that quits: its transport closes with the call in flight, no cancellation sent.
    const { client, transport } = await connect();
    const quitting = client
      .callTool({ name: "chat", arguments: { model: "mock-gpt", prompt: slow("quit") } })
      .then(
        () => "answered",
        () => "closed",
      );
    await heldSoon();
    await transport.close();
    expect(await quitting).toBe("closed");

    // The SDK's request timeout: the call rejects and a notifications/cancelled follows.
    const timed = await connect();
    const timedOut = await timed.client
      .callTool(
        { name: "chat", arguments: { model: "mock-gpt", prompt: slow("timeout") } },
        undefined,
        { timeout: 2_000 },
      )
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect((timedOut as { code?: number }).code).toBe(ErrorCode.RequestTimeout);

    const ended = (await endedRows(3)).slice(0, 2);
    for (const row of ended) {
      expect(row).toMatchObject({
        via: "mcp",
        endpoint: twin!.endpoint,
        status: twin!.status,
        error_code: twin!.error_code,
        cost_micro: 0,
      });
    }
    expect(await idleMoney(gw)).toEqual(before);
  });
});
