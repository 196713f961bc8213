import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ErrorCode, McpError, type Progress } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { earlyCancelMs, earlyCancelsPerCaller } from "../src/server/mcp/cancellable-calls.js";
import { admin, idleMoney, quota } from "./support/api.js";
import { balanceOnDisk, requestLogOnDisk } from "./support/database-file.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  type Handler,
  openaiJson,
  sleep,
} from "./support/fake-upstream.js";
import {
  backends,
  baseConfigWith,
  gatewayOn,
  KEY,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { mcpClient, mcpResponse, mcpResponses } from "./support/mcp.js";
import { allStreamEvents } from "./support/sse.js";

/**
 * Tool calls that take long: answered as SSE to a client that takes it, with the gateway's
 * keepalive comments while the call runs and `notifications/progress` for a request that asked
 * for them, so neither an edge that cuts a silent response nor the SDK client's request timeout
 * (reset on progress) ends a call that is still working. A call is held by its provider until
 * the test has seen what it waits for, then released: nothing here is timed.
 */

/** The gateway's keepalive interval in these tests, which the progress of a call follows too. */
const KEEPALIVE_MS = 50;
/** The longest a provider holds a call the test never releases (a test that fails). */
const HOLD_BOUND_MS = 8_000;
const HELD_ANSWER = "the held answer";

let upstream: FakeUpstream;
let release = deferred();
let gw: TestGateway | undefined;
const clients: Client[] = [];

/** The provider: a prompt with "hold" waits for the test's release; any other is answered. */
const holding: Handler = async (req) => {
  if (JSON.stringify(req.body.messages ?? "").includes("hold"))
    await Promise.race([release.promise, sleep(HOLD_BOUND_MS)]);
  return openaiJson(HELD_ANSWER, { usage: [11, 7] });
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
});
afterAll(async () => {
  await upstream?.close();
});
beforeEach(() => {
  release = deferred();
  upstream.reset(holding);
});
afterEach(async () => {
  release.resolve();
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  await gw?.close();
  gw = undefined;
});

async function connect(): Promise<Client> {
  const { client } = await mcpClient(gw!.url, KEY, "long-calls");
  clients.push(client);
  return client;
}

const heldChat = (id: number | string, extra: Record<string, unknown> = {}) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name: "chat", arguments: { model: "held-gpt", prompt: "hold on" }, ...extra },
});

const cancel = (requestId: number | string) => ({
  jsonrpc: "2.0",
  method: "notifications/cancelled",
  params: { requestId, reason: "the user pressed Esc" },
});

interface Answer {
  id: unknown;
  result?: { content: { text?: string }[]; isError?: boolean };
  error?: { code: number; message: string };
}

/** A body POSTed to /mcp as a client without the SDK would. */
function rawMcp(
  body: unknown,
  accept = "application/json, text/event-stream",
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${gw!.url}/mcp`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", accept },
    body: JSON.stringify(body),
    signal,
  });
}

const keepalives = (text: string) => (text.match(/^: keepalive$/gm) ?? []).length;
const progressEvents = (text: string) => (text.match(/"notifications\/progress"/g) ?? []).length;

/**
 * The answer's text read to its end; `seen` is called with the text so far as each piece
 * arrives (a test releases the held call from it).
 */
async function readAll(res: Response, seen: (text: string) => void = () => {}): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
    seen(text);
  }
}

/** The request log, once `n` rows are in it (a call ends a moment after its client); at most 10 s. */
async function rowsOnce(n: number) {
  for (let i = 0; i < 500 && (await gw!.listRequests({ limit: 10 })).length < n; i++)
    await sleep(20);
  return gw!.listRequests({ limit: 10 });
}

/** Until the held call's worst case is held on the balance: it has been admitted. */
async function admitted(): Promise<void> {
  for (let i = 0; i < 500 && (await quota(gw!)).held_idr === 0; i++) await sleep(10);
  expect((await quota(gw!)).held_idr).toBeGreaterThan(0);
}

function expectIncreasing(values: number[]): void {
  for (let i = 1; i < values.length; i++) expect(values[i]).toBeGreaterThan(values[i - 1]!);
}

describe("a tool call longer than the client's request timeout", () => {
  it("completes for an SDK client that resets its timeout on progress, and is charged once", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const client = await connect();
    const before = await idleMoney(gw);
    const timeout = 800;
    const started = Date.now();
    const seen: Progress[] = [];
    const result = (await client.callTool(
      { name: "chat", arguments: { model: "held-gpt", prompt: "hold on, this takes long" } },
      undefined,
      {
        timeout,
        resetTimeoutOnProgress: true,
        onprogress: (progress) => {
          seen.push(progress);
          // Released only once the call has outlived its timeout twice over: the progress the
          // gateway sent is all that kept the client waiting.
          if (Date.now() - started > 2 * timeout) release.resolve();
        },
      },
    )) as { content: { type: string; text?: string }[]; isError?: boolean };
    expect(result.isError).toBeFalsy();
    expect(result.content).toEqual([{ type: "text", text: HELD_ANSWER }]);
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expectIncreasing(seen.map((p) => p.progress));

    // Metered exactly once, as its /v1 twin: one row, and the balance moved by its cost.
    const rows = await rowsOnce(1);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ via: "mcp", endpoint: "chat.completions", status: 200 });
    expect(rows[0]!.cost_micro).toBeGreaterThan(0);
    expect(before.balance - (await idleMoney(gw)).balance).toBe(rows[0]!.cost_micro);
    expect(upstream.requests).toHaveLength(1);
  });
});

describe("the SSE answer of a tool call", () => {
  it("carries keepalive comments while the call runs, and progress for the request's progressToken", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const res = await rawMcp(heldChat(7, { _meta: { progressToken: "tok-7" } }));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await readAll(res, (sofar) => {
      if (keepalives(sofar) >= 3 && progressEvents(sofar) >= 3) release.resolve();
    });
    const answerAt = text.indexOf('"id":7');
    expect(answerAt).toBeGreaterThan(0);
    expect(keepalives(text.slice(0, answerAt))).toBeGreaterThanOrEqual(3);

    const messages = (await allStreamEvents(new Response(text))).map(
      (event) => event.data as Record<string, unknown>,
    );
    const answer = messages.at(-1)!;
    expect(answer).toEqual({
      jsonrpc: "2.0",
      id: 7,
      result: {
        content: [{ type: "text", text: HELD_ANSWER }],
        _meta: { "model-gateway/request_id": expect.stringMatching(/^req_[\w-]+$/) },
      },
    });
    const progress = messages.slice(0, -1);
    expect(progress.length).toBeGreaterThanOrEqual(3);
    for (const notification of progress) {
      expect(notification).toMatchObject({
        jsonrpc: "2.0",
        method: "notifications/progress",
        params: { progressToken: "tok-7" },
      });
    }
    expectIncreasing(progress.map((n) => (n.params as Progress).progress));
  });

  it("has keepalives but no progress for a request without a progressToken, and a batch's answers all come", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const single = await rawMcp(heldChat(1));
    expect(single.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await readAll(single, (sofar) => {
      if (keepalives(sofar) >= 2) release.resolve();
    });
    expect(keepalives(text)).toBeGreaterThanOrEqual(2);
    expect(progressEvents(text)).toBe(0);
    const events = await allStreamEvents(new Response(text));
    expect(events.map((e) => (e.data as { id?: unknown }).id)).toEqual([1]);

    // A batch (2025-03-26, which a POST without a version header speaks) of a held call and a
    // quick one: both answered on the one stream, kept alive while the held one runs.
    release = deferred();
    const quick = {
      jsonrpc: "2.0",
      id: "quick",
      method: "tools/call",
      params: { name: "chat", arguments: { model: "held-gpt", prompt: "at once" } },
    };
    const batch = await rawMcp([heldChat(2, { _meta: { progressToken: 2 } }), quick]);
    expect(batch.status).toBe(200);
    expect(batch.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const batchText = await readAll(batch, (sofar) => {
      if (sofar.includes('"id":"quick"') && keepalives(sofar) >= 2) release.resolve();
    });
    const answers = await mcpResponses<{ id: unknown; result?: { content: unknown } }>(
      new Response(batchText, { headers: { "content-type": "text/event-stream" } }),
    );
    expect(answers.map((a) => a.id).sort()).toEqual([2, "quick"]);
    for (const answer of answers)
      expect(answer.result?.content).toEqual([{ type: "text", text: HELD_ANSWER }]);
    expect(progressEvents(batchText)).toBeGreaterThanOrEqual(1);
    const rows = await rowsOnce(3);
    expect(rows.map((r) => [r.via, r.status])).toEqual([
      ["mcp", 200],
      ["mcp", 200],
      ["mcp", 200],
    ]);
  });

  it("is not given to a client that takes only JSON, nor to requests other than tool calls", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    // The transport's own answer to a client that does not take both: unchanged, nothing runs.
    const jsonOnly = await rawMcp(heldChat(1), "application/json");
    expect(jsonOnly.status).toBe(406);
    expect(jsonOnly.headers.get("content-type")).toMatch(/^application\/json/);
    expect(((await jsonOnly.json()) as { error: { code: number } }).error.code).toBe(-32000);
    expect(upstream.requests).toHaveLength(0);

    for (const request of [
      { jsonrpc: "2.0", id: 1, method: "tools/list" },
      {
        jsonrpc: "2.0",
        id: 2,
        method: "initialize",
        params: {
          protocolVersion: "2025-06-18",
          capabilities: {},
          clientInfo: { name: "raw", version: "1" },
        },
      },
    ]) {
      const res = await rawMcp(request);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(((await res.json()) as { id: number }).id).toBe(request.id);
    }
    expect(await gw.listRequests()).toEqual([]);
  });
});

describe("a long call whose client leaves is charged nothing, as its /v1 twin", () => {
  it("an SDK client that cancels: the twin ends client_closed", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const client = await connect();
    const before = await idleMoney(gw);
    const abort = new AbortController();
    const call = client
      .callTool(
        { name: "chat", arguments: { model: "held-gpt", prompt: "hold, then be cancelled" } },
        undefined,
        { signal: abort.signal, onprogress: () => {}, resetTimeoutOnProgress: true },
      )
      .then(
        () => "answered",
        () => "cancelled",
      );
    await admitted();
    abort.abort("the user pressed Esc");
    expect(await call).toBe("cancelled");
    const rows = await rowsOnce(1);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ via: "mcp", error_code: "client_closed", cost_micro: 0 });
    expect(await idleMoney(gw)).toEqual(before);
    // The provider's call was cut, not left to run for nobody.
    for (let i = 0; i < 200 && upstream.aborted === 0; i++) await sleep(10);
    expect(upstream.aborted).toBe(1);
  });

  it("a client that hangs up mid-SSE: the twin ends client_closed and the provider's call is cut", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const before = await idleMoney(gw);
    const leaving = new AbortController();
    const res = await rawMcp(
      heldChat(9, { _meta: { progressToken: "tok-9" } }),
      undefined,
      leaving.signal,
    );
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const read = readAll(res, (sofar) => {
      if (keepalives(sofar) >= 1 && progressEvents(sofar) >= 1) leaving.abort();
    }).then(
      () => "read to its end",
      () => "left",
    );
    expect(await read).toBe("left");
    const [row] = await rowsOnce(1);
    expect(row).toMatchObject({ via: "mcp", error_code: "client_closed", cost_micro: 0 });
    expect(await idleMoney(gw)).toEqual(before);
    for (let i = 0; i < 200 && upstream.aborted === 0; i++) await sleep(10);
    expect(upstream.aborted).toBe(1);

    // The gateway serves the next call as ever.
    const next = await rawMcp({
      jsonrpc: "2.0",
      id: 10,
      method: "tools/call",
      params: { name: "chat", arguments: { model: "held-gpt", prompt: "at once" } },
    });
    const [answer] = await mcpResponses<{ id: number; result: { content: unknown } }>(next);
    expect(answer).toMatchObject({ id: 10, result: { content: [{ text: HELD_ANSWER }] } });
  });

  it("on a POST the transport refuses (a protocol version it does not speak, JSON only, no JSON) cancels nothing: the call runs and is charged once", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const before = await idleMoney(gw);
    const call = rawMcp(heldChat(31)).then((res) => mcpResponse<Answer>(res));
    await admitted();
    const refusals: [Record<string, string>, number][] = [
      [{ "mcp-protocol-version": "1999-01-01" }, 400],
      [{ accept: "application/json" }, 406],
      [{ "content-type": "text/plain" }, 415],
    ];
    for (const [headers, status] of refusals) {
      const res = await fetch(`${gw.url}/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${KEY}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          ...headers,
        },
        body: JSON.stringify(cancel(31)),
      });
      expect(res.status).toBe(status);
      expect(((await res.json()) as { error: { code: number } }).error.code).toBeLessThan(0);
    }
    release.resolve();
    const answer = await call;
    expect(answer.error).toBeUndefined();
    expect(answer.result?.content).toEqual([{ type: "text", text: HELD_ANSWER }]);
    const rows = await rowsOnce(1);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ via: "mcp", status: 200 });
    expect(before.balance - (await idleMoney(gw)).balance).toBe(rows[0]!.cost_micro);

    // The same cancellation, sent as the transport takes it, ends the id's next call.
    release = deferred();
    const next = rawMcp(heldChat(31)).then((res) => mcpResponse<Answer>(res));
    await admitted();
    expect((await rawMcp(cancel(31))).status).toBe(202);
    expect((await next).error?.code).toBe(ErrorCode.ConnectionClosed);
  });
});

describe.each(backends)("a shared key at its address's limit (%s)", (backend) => {
  it("an SDK client still cancels its call: the cancellation is no request, the twin ends client_closed, nothing is charged", async () => {
    // The address's limit counts in the clock's minute: on a manual clock the loop that uses it up
    // stays in one.
    gw = await gatewayOn(backend, { keepaliveMs: KEEPALIVE_MS, config: config(), clock: "manual" });
    const { client } = await mcpClient(gw.url, SHARED_KEY, "shared-at-limit");
    clients.push(client);
    const before = await idleMoney(gw);
    const abort = new AbortController();
    const call = client
      .callTool(
        { name: "chat", arguments: { model: "held-gpt", prompt: "hold, then be cancelled" } },
        undefined,
        { signal: abort.signal, onprogress: () => {}, resetTimeoutOnProgress: true },
      )
      .then(
        () => "answered",
        () => "cancelled",
      );
    await admitted();
    // The address's minute is used up: the next request is refused.
    let refusedAfter: number | undefined;
    for (let sent = 0; sent < 40 && refusedAfter === undefined; sent++) {
      await client.listTools().catch((err: unknown) => {
        expect(String(err)).toMatch(/429|too many requests/i);
        refusedAfter = sent;
      });
    }
    expect(refusedAfter).toBeDefined();
    abort.abort("the user pressed Esc");
    expect(await call).toBe("cancelled");
    const rows = await rowsOnce(1);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ via: "mcp", error_code: "client_closed", cost_micro: 0 });
    expect(await idleMoney(gw)).toEqual(before);
    for (let i = 0; i < 200 && upstream.aborted === 0; i++) await sleep(10);
    expect(upstream.aborted).toBe(1);
  });
});

describe("a cancellation that arrives before its call", () => {
  it("on a POST of its own, before the call's: the call ends at once, the provider is not asked, nothing is charged", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const before = await idleMoney(gw);
    // The client sent the call and then its cancellation; the cancellation came in first.
    expect((await rawMcp(cancel(42))).status).toBe(202);
    const answer = await mcpResponse<Answer>(await rawMcp(heldChat(42)));
    expect(answer.id).toBe(42);
    expect(answer.result).toBeUndefined();
    expect(answer.error?.code).toBe(ErrorCode.ConnectionClosed);
    expect(answer.error?.message).toMatch(/cancelled this call/);
    expect(upstream.requests).toHaveLength(0);
    expect(await gw.listRequests()).toEqual([]);
    expect(await idleMoney(gw)).toEqual(before);

    // It was used up: the next call under that id runs.
    release.resolve();
    const next = await mcpResponse<Answer>(await rawMcp(heldChat(42)));
    expect(next.result?.content).toEqual([{ type: "text", text: HELD_ANSWER }]);
    expect(upstream.requests).toHaveLength(1);
  });

  it("in a batch with its call, before or after it: the call is not run", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    const before = await idleMoney(gw);
    for (const [id, batch] of [
      ["c-7", [cancel("c-7"), heldChat("c-7")]],
      ["c-8", [heldChat("c-8"), cancel("c-8")]],
    ] as const) {
      // The POST is answered once each of its requests is: the cancelled call's error ends it.
      const answered = rawMcp(batch).then((res) => mcpResponses<Answer>(res));
      const answers = await Promise.race([answered, sleep(HOLD_BOUND_MS).then(() => "no answer")]);
      expect(answers, id).toEqual([
        {
          jsonrpc: "2.0",
          id,
          error: expect.objectContaining({ code: ErrorCode.ConnectionClosed }),
        },
      ]);
    }
    expect(upstream.requests).toHaveLength(0);
    expect(await gw.listRequests()).toEqual([]);
    expect(await idleMoney(gw)).toEqual(before);
  });

  it("one that comes late, for a call already answered, is not kept: the id's next call runs", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config() });
    release.resolve();
    const first = await mcpResponse<Answer>(await rawMcp(heldChat(5)));
    expect(first.result?.content).toEqual([{ type: "text", text: HELD_ANSWER }]);
    // The client's timeout fired as the answer was on its way; another client numbering from 0
    // on the same key and address then sends its own call 5.
    expect((await rawMcp(cancel(5))).status).toBe(202);
    const again = await mcpResponse<Answer>(await rawMcp(heldChat(5)));
    expect(again.error).toBeUndefined();
    expect(again.result?.content).toEqual([{ type: "text", text: HELD_ANSWER }]);
    expect(upstream.requests).toHaveLength(2);
  });

  it("is kept a while and a few per caller: one older than that, or past the cap, cancels nothing", async () => {
    gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config(), clock: "manual" });
    release.resolve();
    const quick = async (id: number) => mcpResponse<Answer>(await rawMcp(heldChat(id)));

    await rawMcp(cancel(1));
    gw.clock.advance(earlyCancelMs);
    expect((await quick(1)).result?.isError).toBeFalsy();
    expect(upstream.requests).toHaveLength(1);

    // One past the cap is not kept; the ones within it are.
    const ids = Array.from({ length: earlyCancelsPerCaller + 1 }, (_, i) => 100 + i);
    for (const id of ids) await rawMcp(cancel(id));
    expect((await quick(ids.at(-1)!)).result?.isError).toBeFalsy();
    expect(upstream.requests).toHaveLength(2);
    expect((await quick(ids[0]!)).error).toBeDefined();
    expect(upstream.requests).toHaveLength(2);
  });
});

describe.each(backends)("calls whose account is suspended while they run, on %s", (backend) => {
  it("end with a refusal naming account_suspended, the provider's work cut and nothing charged, as a /v1 stream is ended", async () => {
    gw = await gatewayOn(backend, { keepaliveMs: KEEPALIVE_MS, config: config() });
    const client = await connect();
    const before = await idleMoney(gw);
    type Result = { content: { type: string; text?: string }[]; isError?: boolean };
    // An image (its provider takes a minute) and a chat (its provider holds it), both admitted.
    const image = client.callTool({
      name: "generate_image",
      arguments: { model: "slow-image", prompt: "a lighthouse", size: "256x256" },
    }) as Promise<Result>;
    await admitted();
    const chat = client.callTool({
      name: "chat",
      arguments: { model: "held-gpt", prompt: "hold while the account is suspended" },
    }) as Promise<Result>;
    for (let i = 0; i < 500 && upstream.requests.length === 0; i++) await sleep(10);
    expect(upstream.requests).toHaveLength(1);
    expect((await admin(gw, "POST", "/accounts/acct/suspend")).status).toBe(200);
    const ended = await Promise.race([
      Promise.all([image, chat]),
      sleep(HOLD_BOUND_MS).then(() => "still running"),
    ]);
    expect(ended).not.toBe("still running");
    for (const result of ended as Result[]) {
      expect(result.isError).toBe(true);
      expect(result.content[0]!.text).toMatch(/^account_suspended: /);
    }
    for (let i = 0; i < 200 && upstream.aborted === 0; i++) await sleep(10);
    expect(upstream.aborted).toBe(1);

    const rows = await rowsOnce(2);
    expect(rows.map((r) => r.endpoint).sort()).toEqual(["chat.completions", "images.generations"]);
    for (const row of rows) {
      expect(row).toMatchObject({
        via: "mcp",
        status: 401,
        error_code: "account_suspended",
        cost_micro: 0,
      });
    }
    // The next call is refused by the key check, as every request of a suspended account is.
    const refused = await rawMcp(heldChat(2));
    expect(refused.status).toBe(401);
    expect(await refused.text()).toBe(
      "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
    );
    // Read once reinstated (the quota is the account's own key's to read).
    expect((await admin(gw, "POST", "/accounts/acct/reinstate")).status).toBe(200);
    expect(await idleMoney(gw)).toEqual(before);
  });
});

describe("a long call in flight when the gateway closes", () => {
  it("is answered an error at once, not left to the client's timeout, and charged nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-long-close-"));
    try {
      const db = join(dir, "gateway.db");
      gw = await testGateway({ keepaliveMs: KEEPALIVE_MS, config: config(), db });
      const client = await connect();
      const before = await idleMoney(gw);
      // The SDK's default request timeout (60 s): a call whose SSE answer is cut waits that long.
      const call = client
        .callTool({ name: "chat", arguments: { model: "held-gpt", prompt: "hold past the close" } })
        .then(
          () => "answered",
          (err: unknown) => err,
        );
      await admitted();
      const closing = gw;
      gw = undefined;
      await closing.close();
      const ended = await Promise.race([call, sleep(HOLD_BOUND_MS).then(() => "still waiting")]);
      expect(ended).toBeInstanceOf(McpError);
      expect((ended as McpError).code).toBe(ErrorCode.ConnectionClosed);
      expect((ended as McpError).message).toMatch(/shutting down/);
      const rows = requestLogOnDisk(db);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ error_code: "client_closed", cost_micro: 0 });
      expect(balanceOnDisk(db, "acct")).toBe(before.balance);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
