import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import type { RequestLogRow } from "../src/store/types.js";
import { balanceOnDisk, requestLogOnDisk } from "./support/database-file.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import { ADMIN_KEY, baseConfigWith, KEY, LOGIN_KEY } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * A client that has a real `gateway serve` SIGKILLed under it, at each point of a request's life,
 * and looks at what the next start (or, on Postgres, the gateway that survives) made of it: every
 * token a client received is paid for, once; nothing stays held; nothing that was answered or
 * written before the kill is lost.
 */

const dir = mkdtempSync(join(tmpdir(), "gateway-crash-hunt-"));
const running: ServeProcess[] = [];
let upstream: FakeUpstream;
let cluster: GatewaysOnPostgres | undefined;

/** What one output delta of the fake carries: one token by every count the meter has. */
const word = "zq ";
const MUSIC_PRICE = 100;
const MUSIC_SECONDS = 3;
const initialMicro = 1_000_000 * 1_000_000;

beforeAll(async () => {
  // An OpenAI-compatible provider that streams a delta per choice every 30 ms for as long as the
  // connection stays open, so a stream is always mid-way when its gateway dies; anything else
  // gets a plain answer.
  upstream = await fakeUpstream("openai", (req) => {
    const messages = req.body.messages as { content: unknown }[] | undefined;
    const asked = JSON.stringify(messages ?? "");
    if (req.body.stream !== true || !asked.includes("drip")) {
      return {
        kind: "json",
        body: {
          id: "chatcmpl-fake",
          object: "chat.completion",
          created: 1_700_000_000,
          model: "upstream-model",
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: "done" },
              logprobs: null,
              finish_reason: "stop",
            },
          ],
          usage: { prompt_tokens: 11, completion_tokens: 1, total_tokens: 12 },
        },
      };
    }
    const choices = typeof req.body.n === "number" ? req.body.n : 1;
    return {
      kind: "drip",
      contentType: "text/event-stream",
      everyMs: 30,
      piece: (index) => {
        const delta = index === 0 ? { role: "assistant", content: "" } : { content: word };
        const chunk = {
          id: "chatcmpl-drip",
          object: "chat.completion.chunk",
          created: 1_700_000_000,
          model: "upstream-model",
          choices: Array.from({ length: choices }, (_, i) => ({
            index: i,
            delta,
            logprobs: null,
            finish_reason: null,
          })),
        };
        return `data: ${JSON.stringify(chunk)}\n\n`;
      },
    };
  });
});

afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  await cluster?.stop();
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-fake-crash"] },
      { id: "mock-jobs", wire: "mock", mock: { job_seconds: 1.5 } },
    ],
    models: [
      {
        name: "drip-gpt",
        provider: "up",
        upstream_model: "upstream-model",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
        max_output_tokens: 2_000,
      },
      {
        name: "crash-music",
        provider: "mock-jobs",
        modality: "music",
        price_per_unit: MUSIC_PRICE,
      },
    ],
  });
}

const bearer = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };

/** A stream as its client reads it: the request id, and the deltas it has received so far. */
interface OpenStream {
  label: string;
  requestId: string;
  /** Deltas received (each one token): counted while the stream lasts. */
  deltas(): number;
  /** What the client has received so far. */
  text(): string;
  /** Resolves once the connection ended, however. */
  ended: Promise<void>;
}

async function openStream(
  url: string,
  label: string,
  path: string,
  body: object,
): Promise<OpenStream> {
  const res = await fetch(`${url}${path}`, {
    method: "POST",
    headers: bearer,
    body: JSON.stringify({ ...body, stream: true }),
  });
  if (res.status !== 200) throw new Error(`${label}: ${res.status} ${await res.text()}`);
  const requestId = res.headers.get("x-request-id");
  if (!requestId) throw new Error(`${label}: no x-request-id`);
  let text = "";
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  const ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      // The gateway died under the stream.
    }
  })();
  return {
    label,
    requestId,
    deltas: () => text.split(word.trim()).length - 1,
    text: () => text,
    ended,
  };
}

/** Waits until every stream delivered at least `n` deltas to its client. */
async function deliveredAtLeast(streams: OpenStream[], n: number): Promise<void> {
  await eventually(
    async () => streams.map((s) => ({ label: s.label, deltas: s.deltas() })),
    (seen) => seen.every((s) => s.deltas >= n),
    20_000,
    "every stream delivering",
  );
}

/** The streams every client style opens toward the dripping provider. */
function openAllStreams(url: string): Promise<OpenStream[]> {
  const model = "drip-gpt";
  const messages = [{ role: "user", content: "drip please" }];
  return Promise.all([
    openStream(url, "chat", "/v1/chat/completions", { model, messages }),
    openStream(url, "chat n=2", "/v1/chat/completions", { model, messages, n: 2 }),
    openStream(url, "messages", "/v1/messages", { model, messages, max_tokens: 1_000 }),
    openStream(url, "responses", "/v1/responses", {
      model,
      input: "drip please",
      store: true,
      max_output_tokens: 1_000,
    }),
  ]);
}

/** The log rows of streams the gateway died under: at least what each delivered, within its hold. */
function expectChargedForDelivery(rows: RequestLogRow[], streams: OpenStream[]): void {
  for (const stream of streams) {
    const row = rows.find((r) => r.id === stream.requestId);
    expect(row, `${stream.label}: no request_log row`).toBeDefined();
    expect(row!.state, stream.label).toBe("interrupted");
    expect(row!.stream, stream.label).toBe(1);
    expect(row!.output_tokens, stream.label).toBeGreaterThanOrEqual(stream.deltas());
    // Each delivered token costs 20_000 micro-IDR.
    expect(row!.cost_micro, stream.label).toBeGreaterThanOrEqual(stream.deltas() * 20_000);
    expect(row!.cost_micro, stream.label).toBeLessThanOrEqual(row!.reserved_micro);
  }
}

async function getJson<T>(url: string, path: string, key = KEY): Promise<T> {
  const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${key}` } });
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

async function postJson(
  url: string,
  path: string,
  body: object,
  headers: Record<string, string> = bearer,
): Promise<Response> {
  return fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

describe("a gateway on SQLite SIGKILLed with requests of every kind in flight, then started again", () => {
  it("charges each part-delivered stream at least what it delivered, once; releases the rest; resumes the job; keeps what was written", async () => {
    const dbPath = join(dir, "gateway.db");
    const configPath = join(dir, "config.json");
    writeFileSync(configPath, JSON.stringify(config()));
    const first = await serveProcess(["--db", dbPath, "--config", configPath, "--quiet"]);
    running.push(first);
    const url = first.url;

    // Written and answered before the kill: a whole stream (its charge, in the journal, and its
    // delivery mark must not both land), a stored Responses turn, a thread's first turn, a
    // per-tool key, and a key revoked.
    const whole = await postJson(url, "/v1/chat/completions", {
      model: "mock-gpt",
      messages: [{ role: "user", content: "a whole stream [[mock:words=40]]" }],
      stream: true,
    });
    expect(await whole.text()).toContain("data: [DONE]");
    const wholeId = whole.headers.get("x-request-id");
    const stored = await postJson(url, "/v1/responses", {
      model: "mock-gpt",
      input: "remember this",
      store: true,
    });
    expect(stored.status).toBe(200);
    const storedId = ((await stored.json()) as { id: string }).id;
    const threadStart = await postJson(url, "/v1/messages", {
      model: "drip-gpt",
      max_tokens: 64,
      messages: [{ role: "user", content: "start a thread" }],
      thread: { type: "create" },
    });
    expect(threadStart.status, await threadStart.clone().text()).toBe(200);
    const threadReply = ((await threadStart.json()) as { id: string }).id;
    const login = { authorization: `Bearer ${LOGIN_KEY}`, "content-type": "application/json" };
    const minted = await postJson(url, "/api/keys", { label: "kept" }, login);
    expect(minted.status, await minted.clone().text()).toBe(201);
    const toolKey = ((await minted.json()) as { key: string }).key;
    const doomedKey = await postJson(url, "/api/keys", { label: "revoked" }, login);
    const doomed = (await doomedKey.json()) as { id: string; key: string };
    const revoked = await fetch(`${url}/api/keys/${doomed.id}`, {
      method: "DELETE",
      headers: login,
    });
    expect(revoked.status).toBeLessThan(300);

    // In flight when the process dies: a JSON answer and an MCP tool call waiting for their
    // upstream, a stream of every client style part-delivered, and a music job running.
    const waiting = postJson(url, "/v1/chat/completions", {
      model: "mock-gpt",
      messages: [{ role: "user", content: "never answered [[mock:delay=60000]]" }],
    }).then(
      (res) => res.status,
      () => "dropped",
    );
    const mcp = new Client({ name: "crash-hunt", version: "1.0.0" });
    await mcp.connect(
      new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${KEY}` } },
      }),
    );
    const toolCall = mcp
      .callTool({
        name: "chat",
        arguments: { model: "mock-gpt", prompt: "never answered either [[mock:delay=60000]]" },
      })
      .then(
        () => "answered",
        () => "dropped",
      );
    const streams = await openAllStreams(url);
    await deliveredAtLeast(streams, 3);
    await eventually(
      async () =>
        (
          await fetch(`${url}/metrics`, {
            headers: { authorization: `Bearer ${ADMIN_KEY}` },
          })
        ).text(),
      (text) => Number(/^gateway_holds_in_flight (\d+)$/m.exec(text)?.[1] ?? 0) >= 6,
      20_000,
      "every request held",
    );
    // The job last, so that it is still running when the process dies, however slow the machine.
    const job = await postJson(url, "/v1/music/generations", {
      model: "crash-music",
      prompt: "across a crash",
      duration: MUSIC_SECONDS,
    });
    expect(job.status).toBe(202);
    const jobId = ((await job.json()) as { id: string }).id;
    await eventually(
      () => getJson<{ status: string }>(url, `/v1/music/generations/${jobId}`),
      (view) => view.status === "running",
      10_000,
      "the job running",
    );

    await first.stop("SIGKILL");
    await Promise.all(streams.map((s) => s.ended));
    expect(await waiting).toBe("dropped");
    // The tool call's answer is SSE, cut by the kill: the SDK client keeps such a call pending
    // until its request timeout (60 s) rather than failing it, so the agent closing it ends it.
    await mcp.close().catch(() => {});
    expect(await toolCall).toBe("dropped");

    const second = await serveProcess(["--db", dbPath, "--config", configPath, "--quiet"]);
    running.push(second);
    const after = second.url;

    // The job runs again and is charged once, for its seconds.
    await eventually(
      () => getJson<{ status: string }>(after, `/v1/music/generations/${jobId}`),
      (view) => view.status === "completed",
      15_000,
      "the job completing after the restart",
    );
    // Nothing stays held once the job is done.
    await eventually(
      () => getJson<{ held_idr: number }>(after, "/v1/account/quota"),
      (q) => q.held_idr === 0,
      5_000,
      "nothing held",
    );

    // What was written before the kill is there after it.
    const next = await postJson(after, "/v1/responses", {
      model: "mock-gpt",
      previous_response_id: storedId,
      input: "and now?",
    });
    expect(next.status, await next.clone().text()).toBe(200);
    // The turn the crash cut off was never stored: a next turn naming it is refused, not
    // answered from half a turn.
    const cutTurn = /"id":"(resp_[^"]+)"/.exec(streams[3].text())?.[1];
    expect(cutTurn).toBeDefined();
    const afterCut = await postJson(after, "/v1/responses", {
      model: "mock-gpt",
      previous_response_id: cutTurn,
      input: "and then?",
    });
    expect(afterCut.status).toBe(400);
    expect(await afterCut.text()).toContain("previous_response_id");
    const continued = await postJson(after, "/v1/messages", {
      model: "drip-gpt",
      max_tokens: 64,
      messages: [{ role: "user", content: "go on" }],
      thread: { type: "continue", previous_message_id: threadReply },
    });
    expect(continued.status, await continued.clone().text()).toBe(200);
    const withToolKey = await fetch(`${after}/v1/account/quota`, {
      headers: { authorization: `Bearer ${toolKey}` },
    });
    expect(withToolKey.status).toBe(200);
    const withRevoked = await fetch(`${after}/v1/account/quota`, {
      headers: { authorization: `Bearer ${doomed.key}` },
    });
    expect(withRevoked.status).toBe(401);

    // The usage report lists each of them, as interrupted.
    const listed = await getJson<{ data: { id: string; state: string }[] }>(
      after,
      "/v1/usage/requests?limit=50",
    );
    for (const stream of streams)
      expect(listed.data.find((r) => r.id === stream.requestId)?.state, stream.label).toBe(
        "interrupted",
      );

    await second.stop();
    const rows = requestLogOnDisk(dbPath);
    // Every stream the gateway died under is charged at least what its client received.
    expectChargedForDelivery(rows, streams);
    expect(rows.filter((r) => r.id === wholeId).map((r) => r.state)).toEqual(["settled"]);
    // The requests that had received nothing are charged nothing.
    const charged = rows.filter((r) => r.cost_micro > 0);
    expect(charged.filter((r) => r.endpoint.includes("mcp"))).toEqual([]);
    // The job: one row, charged its seconds once.
    const music = rows.filter((r) => r.endpoint === "music.generations");
    expect(music).toHaveLength(1);
    expect(music[0].cost_micro).toBe(MUSIC_SECONDS * MUSIC_PRICE * 1_000_000);
    // Nothing charged twice: one row per request, and the balance fell by exactly their costs.
    expect(new Set(rows.map((r) => r.id)).size).toBe(rows.length);
    const spent = rows
      .filter((r) => r.account_id === "acct")
      .reduce((sum, r) => sum + r.cost_micro, 0);
    expect(balanceOnDisk(dbPath, "acct") + spent).toBe(initialMicro);
  }, 60_000);
});

describe("two gateways on one Postgres, one SIGKILLed with streams part-delivered", () => {
  it("the survivor's reaper charges each cut-off stream at least what it delivered, once, and releases the rest", async () => {
    cluster = await gatewaysOnPostgres(2, config(), { env: { GATEWAY_JOB_LEASE_MS: "3000" } });
    const db = cluster;
    const [doomed, survivor] = db.gateways;

    const job = await postJson(survivor.url, "/v1/music/generations", {
      model: "crash-music",
      prompt: "across a crash, on Postgres",
      duration: MUSIC_SECONDS,
    });
    expect(job.status).toBe(202);
    const jobId = ((await job.json()) as { id: string }).id;
    // A stream on the survivor runs to its end meanwhile.
    const whole = await postJson(survivor.url, "/v1/chat/completions", {
      model: "mock-gpt",
      messages: [{ role: "user", content: "a whole stream [[mock:words=40]]" }],
      stream: true,
    });
    const streams = await openAllStreams(doomed.url);
    await deliveredAtLeast(streams, 3);
    expect(await whole.text()).toContain("data: [DONE]");
    const wholeId = whole.headers.get("x-request-id");

    await killByPid(doomed);
    await Promise.all(streams.map((s) => s.ended));

    // Once the dead gateway's lease ran out, the survivor settles what its streams delivered and
    // gives back the rest of what it held or leased.
    await eventually(
      () =>
        db.sql<{ holds: number; leased: number }>(
          `SELECT (SELECT count(*) FROM holds WHERE instance_id IS NOT NULL)::int AS holds,
            (SELECT coalesce(sum(leased_micro), 0) FROM accounts)::bigint AS leased`,
        ),
      ([left]) => left.holds === 0 && left.leased === 0,
      40_000,
      "holds and leases after the dead gateway's lease",
    );
    await eventually(
      () => getJson<{ status: string }>(survivor.url, `/v1/music/generations/${jobId}`),
      (view) => view.status === "completed",
      20_000,
      "the job completing",
    );
    const rows = await db.sql<RequestLogRow>("SELECT * FROM request_log");
    expectChargedForDelivery(rows, streams);
    expect(rows.filter((r) => r.id === wholeId).map((r) => r.state)).toEqual(["settled"]);
    const music = rows.filter((r) => r.endpoint === "music.generations");
    expect(music.map((r) => r.cost_micro)).toEqual([MUSIC_SECONDS * MUSIC_PRICE * 1_000_000]);
    const [account] = await db.sql<{ balance: number; held: number }>(
      "SELECT balance_micro AS balance, held_micro AS held FROM accounts WHERE id = 'acct'",
    );
    expect(account.held).toBe(0);
    const spent = rows
      .filter((r) => r.account_id === "acct")
      .reduce((sum, r) => sum + r.cost_micro, 0);
    expect(account.balance + spent).toBe(initialMicro);
    expect(survivor.child.exitCode).toBeNull();
  }, 90_000);
});
