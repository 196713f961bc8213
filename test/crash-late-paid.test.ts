import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { deferred, type FakeUpstream, fakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { baseConfig } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
} from "./support/gateways-on-postgres.js";
import type { ServeProcess } from "./support/serve-process.js";

/**
 * A gateway frozen past its lease (SIGSTOP by its pid, longer than the 15 s lease) is taken as
 * dead: another gateway's reaper releases its holds and its lease, and charges a stream it cut by
 * its delivery mark. Run again, it still has answers to hand over. Each paid one is charged once,
 * when the account can still pay (else not handed over: 503 storage_unavailable, recorded, nothing
 * charged), and the balance, PAYG spend and subscription window agree with the request log
 * (docs/scaling-out.md, docs/metering.md).
 */

/**
 * Output at 1,000,000 IDR per million tokens: one IDR (a million micro-IDR) a token, so an
 * answer's charge in IDR is its completion tokens.
 */
const MICRO_PER_TOKEN = 1_000_000;

let chats: FakeUpstream;
/** Until released, the provider holds every answer whose first message starts "in flight". */
let gate = deferred();

beforeAll(async () => {
  chats = await fakeUpstream("openai", async (req) => {
    const content = (req.body.messages as { content: string }[])[0]?.content ?? "";
    if (content.startsWith("in flight")) await gate.promise;
    // The completion tokens the provider reports are the content's last number.
    const tokens = Number(content.split(" ").at(-1));
    return openaiJson("ok", { usage: [1, tokens] });
  });
});

let cluster: GatewaysOnPostgres | undefined;
let frozen: ServeProcess | undefined;
afterEach(async () => {
  if (frozen?.child.pid !== undefined && frozen.child.exitCode === null)
    process.kill(frozen.child.pid, "SIGCONT");
  frozen = undefined;
  gate.resolve();
  await cluster?.stop();
  cluster = undefined;
  chats.requests.length = 0;
  gate = deferred();
});
afterAll(async () => {
  await chats?.close();
});

const keys = {
  rich: "kn-test-late-rich-00000000000000000",
  leased: "kn-test-late-leased-000000000000000",
  payg: "kn-test-late-payg-00000000000000000",
  sub: "kn-test-late-sub-000000000000000000",
  short: "kn-test-late-short-0000000000000000",
  streams: "kn-test-late-streams-00000000000000",
  thin: "kn-test-late-thin-00000000000000000",
};
type Who = keyof typeof keys;

function config(): ConfigInput {
  const base = baseConfig();
  const account = (id: Who, rest: Record<string, unknown>) => ({
    id,
    rpm_limit: 1000,
    keys: [{ id: `k-${id}`, value: keys[id] }],
    ...rest,
  });
  return {
    ...base,
    providers: [
      ...base.providers!,
      { id: "talk", wire: "openai", base_url: chats.baseUrl, api_keys: ["sk-talk"] },
      // A word every 30 ms: a stream of 300 words is midway for seconds.
      { id: "paced", wire: "mock", mock: { chunk_interval_ms: 30 } },
    ],
    models: [
      ...base.models!,
      {
        name: "dear",
        provider: "talk",
        upstream_model: "dear-up",
        price_output_per_mtok: MICRO_PER_TOKEN,
        max_output_tokens: 1_000,
      },
      {
        name: "dear-stream",
        provider: "paced",
        upstream_model: "mock-gpt",
        price_output_per_mtok: MICRO_PER_TOKEN,
        max_output_tokens: 1_000,
      },
    ],
    accounts: [
      ...base.accounts!,
      account("rich", { balance_idr: 1_000 }),
      // Far from its limits: its second request is admitted from its gateway's lease.
      account("leased", { balance_idr: 100_000 }),
      account("payg", {
        balance_idr: 0,
        payg: { enabled: true, limit_idr: 100, window_seconds: 86_400 },
      }),
      account("sub", {
        balance_idr: 0,
        subscription: {
          plan: "pro",
          started_at: Date.now() - 60_000,
          windows: [{ name: "1d", seconds: 86_400, quota: 2 }],
          payg_fallback: false,
          free_fallback: false,
        },
      }),
      account("short", { balance_idr: 100 }),
      account("streams", { balance_idr: 10_000 }),
      account("thin", { balance_idr: 1_200 }),
    ],
  };
}

const sdk = (gw: { url: string }, who: Who) =>
  new OpenAI({ apiKey: keys[who], baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 120_000 });

interface Seen {
  status: number | "dropped";
  code?: string | null;
  requestId?: string | null;
  tokens?: number;
}

/** A chat answer of `tokens` completion tokens as an OpenAI client sees it. */
async function ask(gw: { url: string }, who: Who, content: string, maxTokens = 60): Promise<Seen> {
  try {
    const answer = await sdk(gw, who).chat.completions.create({
      model: "dear",
      messages: [{ role: "user", content }],
      max_tokens: maxTokens,
    });
    return { status: 200, tokens: answer.usage?.completion_tokens };
  } catch (err) {
    if (err instanceof OpenAI.APIError && err.status !== undefined)
      return { status: err.status, code: err.code, requestId: err.requestID };
    return { status: "dropped" };
  }
}

/** Freezes a gateway by its pid until the others reaped every hold and lease it had. */
async function freezePastLease(gw: ServeProcess): Promise<void> {
  frozen = gw;
  process.kill(gw.child.pid!, "SIGSTOP");
  await eventually(
    () =>
      cluster!.sql<{ holds: number; leases: number }>(
        `SELECT (SELECT count(*) FROM holds)::int AS holds,
          (SELECT count(*) FROM leases)::int AS leases`,
      ),
    ([left]) => left.holds === 0 && left.leases === 0,
    45_000,
    "the frozen gateway's holds and leases",
  );
}

function thaw(gw: ServeProcess): void {
  process.kill(gw.child.pid!, "SIGCONT");
  frozen = undefined;
}

interface AccountMoney {
  id: string;
  balance: number;
  held: number;
  leased: number;
  payg_spent: number;
  payg_held: number;
}

async function accounts(): Promise<Record<string, AccountMoney>> {
  const rows = await cluster!.sql<AccountMoney>(
    `SELECT id, balance_micro AS balance, held_micro AS held, leased_micro AS leased,
      payg_spent_micro AS payg_spent, payg_held_micro AS payg_held FROM accounts`,
  );
  return Object.fromEntries(rows.map((row) => [row.id, row]));
}

interface LoggedRow {
  account_id: string;
  state: string;
  status: number;
  error_code: string | null;
  payment: string;
  cost_micro: number;
  output_tokens: number;
}

async function rowsOf(who: Who): Promise<LoggedRow[]> {
  return cluster!.sql<LoggedRow>(
    `SELECT account_id, state, status, error_code, payment, cost_micro, output_tokens
      FROM request_log WHERE account_id = $1 ORDER BY created_at, finished_at`,
    [who],
  );
}

describe("a gateway frozen past its lease hands over paid whole answers (postgres)", () => {
  it("each is charged once while its account can pay (balance, lease, PAYG, subscription window); one it cannot pay is refused, recorded, charged nothing", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [slow, survivor] = cluster.gateways;
    // The lease this account's later requests on `slow` are admitted from.
    expect(await ask(slow, "leased", "warm 10")).toEqual({ status: 200, tokens: 10 });
    const inFlight = {
      rich: ask(slow, "rich", "in flight 50"),
      leased: ask(slow, "leased", "in flight 50"),
      payg: ask(slow, "payg", "in flight 50"),
      sub: ask(slow, "sub", "in flight 50"),
      short: ask(slow, "short", "in flight 50"),
    };
    await expect.poll(() => chats.requests.length, { timeout: 10_000 }).toBe(6);
    const [{ leased }] = await cluster.sql<{ leased: number }>(
      "SELECT leased_micro AS leased FROM accounts WHERE id = 'leased'",
    );
    expect(leased).toBeGreaterThan(0);
    await freezePastLease(slow);
    try {
      // What the frozen gateway held is free again: the survivor spends it.
      expect(await ask(survivor, "short", "spend 80", 90)).toEqual({ status: 200, tokens: 80 });
      expect(await ask(survivor, "sub", "spend 5")).toEqual({ status: 200, tokens: 5 });
    } finally {
      thaw(slow);
    }
    gate.resolve();
    const seen = {
      rich: await inFlight.rich,
      leased: await inFlight.leased,
      payg: await inFlight.payg,
      sub: await inFlight.sub,
      short: await inFlight.short,
    };
    const context = JSON.stringify(seen) + cluster.stderr();
    expect(seen.rich, context).toEqual({ status: 200, tokens: 50 });
    expect(seen.leased, context).toEqual({ status: 200, tokens: 50 });
    expect(seen.payg, context).toEqual({ status: 200, tokens: 50 });
    expect(seen.sub, context).toEqual({ status: 200, tokens: 50 });

    const money = await accounts();
    const charged = (tokens: number) => tokens * MICRO_PER_TOKEN;
    expect(await rowsOf("rich")).toMatchObject([
      { state: "settled", status: 200, payment: "balance", cost_micro: charged(50) },
    ]);
    expect(money.rich).toMatchObject({ balance: charged(1_000 - 50), held: 0 });
    expect(await rowsOf("leased")).toMatchObject([
      { state: "settled", status: 200, payment: "balance", cost_micro: charged(10) },
      { state: "settled", status: 200, payment: "balance", cost_micro: charged(50) },
    ]);
    expect(money.leased).toMatchObject({ balance: charged(100_000 - 60), held: 0, leased: 0 });
    expect(await rowsOf("payg")).toMatchObject([
      { state: "settled", status: 200, payment: "payg", cost_micro: charged(50) },
    ]);
    expect(money.payg).toMatchObject({ balance: 0, payg_spent: charged(50), payg_held: 0 });
    const subRows = await rowsOf("sub");
    expect(subRows.map((row) => [row.state, row.payment, row.cost_micro])).toEqual([
      ["settled", "subscription", 0],
      ["settled", "subscription", 0],
    ]);
    const [window] = await cluster.sql<{ used: number; held: number }>(
      "SELECT used, held FROM subscription_usage WHERE account_id = 'sub'",
    );
    expect(window).toEqual({ used: 2, held: 0 });
    // Its quota of two was used by the two answers: a third is refused on either gateway.
    for (const gw of [slow, survivor])
      expect(await ask(gw, "sub", "one more 1")).toMatchObject({ status: 429 });
    // The account cannot pay its answer any more: not handed over, in the client's style.
    expect(seen.short, context).toMatchObject({ status: 503, code: "storage_unavailable" });
    const [{ id: refusedId }] = await cluster.sql<{ id: string }>(
      "SELECT id FROM request_log WHERE account_id = 'short' AND state = 'failed'",
    );
    expect(seen.short.requestId, context).toBe(refusedId);
    expect(await rowsOf("short")).toEqual([
      {
        account_id: "short",
        state: "failed",
        status: 503,
        error_code: "storage_unavailable",
        payment: "balance",
        cost_micro: 0,
        output_tokens: 0,
      },
      {
        account_id: "short",
        state: "settled",
        status: 200,
        error_code: null,
        payment: "balance",
        cost_micro: charged(80),
        output_tokens: 80,
      },
    ]);
    expect(money.short).toMatchObject({ balance: charged(100 - 80), held: 0 });
    const [{ n }] = await cluster.sql<{ n: number }>("SELECT count(*)::int AS n FROM holds");
    expect(n).toBe(0);
  }, 120_000);
});

/** Reads an SSE chat stream as it comes: its deltas, its usage chunk, and whether it finished. */
function readStream(res: Response) {
  let text = "";
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      // The connection broke: what was read is what the client got.
    }
  })();
  const events = () =>
    text
      .split("\n\n")
      .filter((block) => block.startsWith("data: "))
      .map((block) => block.slice("data: ".length));
  return {
    ended,
    deltas: () => text.match(/"content":"[^"]+"/g)?.length ?? 0,
    events,
    /** Everything read so far, as it came. */
    text: () => text,
  };
}

/** Opens a paid stream of 300 words on `gw` and reads it until it delivered 40 pieces. */
async function streamMidway(gw: { url: string }, who: Who) {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys[who]}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "dear-stream",
      messages: [{ role: "user", content: "count [[mock:words=300]]" }],
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  expect(res.status).toBe(200);
  const stream = readStream(res);
  await eventually(
    async () => stream.deltas(),
    (n) => n >= 40,
    20_000,
    "the stream midway",
  );
  return { requestId: res.headers.get("x-request-id"), stream };
}

/** Waits for the stream to end (bounded). */
async function streamEnd(stream: ReturnType<typeof readStream>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    stream.ended,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("the stream never ended")), 60_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

describe("a gateway frozen past its lease midway through a paid stream (postgres)", () => {
  it("the reaper charges its mark; resumed, the client gets the rest and [DONE], and the account is charged once what the stream delivered", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [slow] = cluster.gateways;
    const { requestId, stream } = await streamMidway(slow, "streams");
    await freezePastLease(slow);
    let marked: LoggedRow[];
    try {
      // Taken as dead: the reaper charged the stream what its delivery mark said.
      marked = await eventually(
        () => rowsOf("streams"),
        (rows) => rows.length === 1,
        10_000,
        "the reaper's row",
      );
    } finally {
      thaw(slow);
    }
    expect(marked[0]).toMatchObject({ state: "interrupted" });
    await streamEnd(stream);
    const events = stream.events();
    const context = JSON.stringify(events.slice(-3)) + cluster.stderr();
    expect(events.at(-1), context).toBe("[DONE]");
    const usage = events
      .filter((data) => data !== "[DONE]")
      .map((data) => JSON.parse(data) as { usage?: { completion_tokens: number } })
      .find((chunk) => chunk.usage)?.usage;
    expect(usage, context).toBeDefined();
    expect(usage!.completion_tokens).toBeGreaterThanOrEqual(stream.deltas());
    expect(marked[0].cost_micro, context).toBeLessThan(usage!.completion_tokens * MICRO_PER_TOKEN);
    const rows = await rowsOf("streams");
    expect(rows, context).toEqual([
      {
        account_id: "streams",
        state: "settled",
        status: 200,
        error_code: null,
        payment: "balance",
        cost_micro: usage!.completion_tokens * MICRO_PER_TOKEN,
        output_tokens: usage!.completion_tokens,
      },
    ]);
    const [{ id }] = await cluster.sql<{ id: string }>(
      "SELECT id FROM request_log WHERE account_id = 'streams'",
    );
    expect(id).toBe(requestId);
    const money = await accounts();
    // Charged once: the mark's charge is part of the stream's, not added to it.
    expect(money.streams.balance + rows[0].cost_micro).toBe(10_000 * MICRO_PER_TOKEN);
    expect(money.streams).toMatchObject({ held: 0, leased: 0 });
  }, 120_000);

  it("resumed when the account can no longer pay for what followed the mark: the stream ends with the storage_unavailable error event, charged what its mark said", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [slow, survivor] = cluster.gateways;
    const { stream } = await streamMidway(slow, "thin");
    await freezePastLease(slow);
    let marked: LoggedRow[];
    try {
      marked = await eventually(
        () => rowsOf("thin"),
        (rows) => rows.length === 1,
        10_000,
        "the reaper's row",
      );
      // The survivor spends all but 20 IDR of what the mark left.
      const left = (await accounts()).thin.balance / MICRO_PER_TOKEN;
      const spend = Math.floor(left) - 20;
      expect(await ask(survivor, "thin", `spend ${spend}`, spend)).toEqual({
        status: 200,
        tokens: spend,
      });
    } finally {
      thaw(slow);
    }
    await streamEnd(stream);
    const events = stream.events();
    const context = JSON.stringify(events.slice(-3)) + cluster.stderr();
    expect(events, context).not.toContain("[DONE]");
    expect(events.at(-1), context).toContain("storage_unavailable");
    const rows = await rowsOf("thin");
    // The stream's row is still the reaper's: what the mark charged, no more.
    expect(rows[0], context).toEqual(marked[0]);
    expect(rows.map((row) => row.state)).toEqual(["interrupted", "settled"]);
    const money = await accounts();
    expect(money.thin.balance + rows[0].cost_micro + rows[1].cost_micro).toBe(
      1_200 * MICRO_PER_TOKEN,
    );
    expect(money.thin).toMatchObject({ held: 0 });
  }, 120_000);
});

describe("a gateway frozen past its lease midway through a Responses stream it cannot finish (postgres)", () => {
  it("the stream's response.failed reports the usage its mark was charged, not nothing", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [slow, survivor] = cluster.gateways;
    const res = await fetch(`${slow.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${keys.thin}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "dear-stream",
        input: "count [[mock:words=300]]",
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    const stream = readStream(res);
    await eventually(
      async () => stream.text().split("event: response.output_text.delta\n").length - 1,
      (n) => n >= 40,
      20_000,
      "the stream midway",
    );
    await freezePastLease(slow);
    try {
      await eventually(
        () => rowsOf("thin"),
        (rows) => rows.length === 1,
        10_000,
        "the reaper's row",
      );
      // The survivor spends all but 20 IDR of what the mark left.
      const left = (await accounts()).thin.balance / MICRO_PER_TOKEN;
      const spend = Math.floor(left) - 20;
      expect(await ask(survivor, "thin", `spend ${spend}`, spend)).toMatchObject({ status: 200 });
    } finally {
      thaw(slow);
    }
    await streamEnd(stream);
    const text = stream.text();
    const failed = text.split("\n\n").find((block) => block.startsWith("event: response.failed\n"));
    const context = text.slice(-600) + cluster.stderr();
    expect(failed, context).toBeDefined();
    const { response } = JSON.parse(failed!.slice(failed!.indexOf("data: ") + 6)) as {
      response: { error: { code: string }; usage: { input_tokens: number; output_tokens: number } };
    };
    const error = text.split("\n\n").find((block) => block.startsWith("event: error\n"));
    expect(error, context).toContain('"code":"storage_unavailable"');
    expect(response.error.code, context).toBe("server_error");
    const [charged] = await cluster.sql<{ input_tokens: number; output_tokens: number }>(
      `SELECT input_tokens, output_tokens FROM request_log
        WHERE account_id = 'thin' AND state = 'interrupted'`,
    );
    expect(charged.output_tokens, context).toBeGreaterThan(0);
    expect(response.usage, context).toMatchObject(charged);
  }, 120_000);
});
