import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { SettlementJournal } from "../src/store/sqlite/settlement-journal.js";
import { admin, idleMoney, money, quota } from "./support/api.js";
import { balanceOnDisk, requestLogOnDisk } from "./support/database-file.js";
import {
  anthropicStreamSteps,
  credentialSeen,
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
  type SseStep,
  sleep,
} from "./support/fake-upstream.js";
import {
  backends,
  baseConfigWith,
  chat,
  KEY,
  manualClockStart,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { loggedAs } from "./support/metering.js";
import { createTestDatabase, relayTo } from "./support/postgres.js";

/**
 * An adversarial client of the meter: "every token delivered is paid for, once, on every path a
 * client can take". Streams that end every way with their delivery marks (the journal on SQLite,
 * `deliveries` on Postgres) across a restart; a storage that refuses a stream's mark or its
 * settlement (the client is told nothing was charged: nothing is, then or at a later start);
 * own provider keys that serve a request or are refused in favour of the pool; and the usage
 * listing walked page by page against the balance.
 */

const WORD = "zq ";
/** Micro-IDR per input and per output token of the fake's models. */
const IN = 10_000;
const OUT = 20_000;
const OWN_KEY = "sk-own-key-that-works-7777";
const REFUSED_OWN_KEY = "sk-own-key-refused-8888";
const SUB_KEY = "kn-test-subscriber-key-000000000";
/** What the fake reports for every answer: 11 input tokens, `length` output tokens. */
const INPUT_REPORTED = 11;

let upstream: FakeUpstream;
const dirs: string[] = [];
const open: TestGateway[] = [];

beforeAll(async () => {
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  // An OpenAI-compatible provider that refuses one own key (as a revoked key is refused) and
  // answers anything else: a stream of `WORD`s, or a whole answer, each with its usage.
  upstream = await fakeUpstream("openai", (req) => {
    if (credentialSeen(req) === REFUSED_OWN_KEY)
      return openaiError(401, "Incorrect API key provided", "invalid_api_key");
    if (req.body.stream === true) return { kind: "sse", steps: wordSteps(12) };
    return openaiJson("ok", { usage: [INPUT_REPORTED, 7] });
  });
});
afterEach(async () => {
  for (const gw of open.splice(0)) await gw.close().catch(() => {});
  vi.restoreAllMocks();
});
afterAll(async () => {
  await upstream?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** An OpenAI stream of `length` one-token deltas, reported as such. */
function wordSteps(length: number): SseStep[] {
  return openaiStreamSteps(
    Array.from({ length }, () => WORD),
    { usage: [INPUT_REPORTED, length] },
  );
}

/** The fake's stream with a gate before its `at`-th delta: the stream waits there. */
function gatedSteps(length: number, at: number, gate: Promise<unknown>): SseStep[] {
  const steps = wordSteps(length);
  // Step 0 is the role chunk: the deltas start at 1.
  steps[at + 1] = { ...steps[at + 1], gate };
  return steps;
}

function config(): ConfigInput {
  const fake = (id: string, key: string) => ({
    id,
    wire: "openai" as const,
    base_url: upstream.baseUrl,
    api_keys: [key],
  });
  const priced = (name: string, provider: string) => ({
    name,
    provider,
    upstream_model: "upstream-model",
    price_input_per_mtok: IN,
    price_output_per_mtok: OUT,
    max_output_tokens: 1_000,
  });
  return baseConfigWith({
    providers: [fake("up", "sk-pool-up"), fake("own", "sk-pool-own")],
    models: [priced("up-gpt", "up"), priced("own-gpt", "own")],
    accounts: [
      {
        id: "sub",
        balance_idr: 100,
        // A plan of two requests a day, and nothing else to pay with.
        subscription: { windows: [{ name: "day", seconds: 86_400, quota: 2 }] },
        keys: [{ id: "ksub", value: SUB_KEY }],
      },
    ],
  });
}

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "meter-hunt-2-"));
  dirs.push(dir);
  return dir;
}

async function start(db: string, now?: () => number): Promise<TestGateway> {
  const gw = await testGateway({ db, config: config(), now });
  open.push(gw);
  return gw;
}

async function linkOwnKey(
  gw: TestGateway,
  provider: string,
  key: string,
  account = "acct",
): Promise<void> {
  const res = await admin(gw, "POST", `/accounts/${account}/byok`, { provider, key });
  expect(res.status, await res.clone().text()).toBe(201);
}

/** A stream as its client reads it, until `deltas` of the fake's words have arrived. */
async function readUntil(
  res: Response,
  deltas: number,
): Promise<{ text: string; rest: Promise<string> }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (count(text) < deltas) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const rest = (async () => {
    let more = text;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return more;
        more += decoder.decode(value, { stream: true });
      }
    } catch {
      return more;
    }
  })();
  return { text, rest };
}

/** The fake's words a client received. */
const count = (text: string) => text.split(WORD.trim()).length - 1;

const stream = (model: string, content: string, extra: object = {}) =>
  chat(content, model, { stream: true, ...extra });

describe("delivery marks on SQLite, across a restart", () => {
  it("streams that end every way leave no mark that the next start applies: the log, balance and free allowance are as they were", async () => {
    const db = join(freshDir(), "gateway.db");
    // The free allowance compared across the restart counts in the clock's day: both starts read
    // one time, so midnight cannot fall between them.
    const at = manualClockStart();
    const gw = await start(db, () => at);
    await linkOwnKey(gw, "own", OWN_KEY);
    const words = "[[mock:words=60]]";
    const finished = await Promise.all([
      post(gw, "/v1/chat/completions", stream("mock-gpt", `chat ${words}`)),
      post(gw, "/v1/chat/completions", stream("mock-gpt", `two ${words}`, { n: 2 })),
      post(gw, "/v1/messages", {
        model: "mock-gpt",
        max_tokens: 500,
        stream: true,
        messages: [{ role: "user", content: `messages ${words}` }],
      }),
      post(gw, "/v1/responses", { model: "mock-gpt", stream: true, input: `responses ${words}` }),
      post(gw, "/v1/chat/completions", stream("mock-gpt:free", `free ${words}`)),
      post(gw, "/v1/chat/completions", stream("mock-gpt", `broken ${words} [[mock:break=30]]`)),
    ]);
    const texts = await Promise.all(finished.map((res) => res.text()));
    for (const text of texts.slice(0, 5))
      expect(text).toMatch(/\[DONE\]|message_stop|response\.completed/);
    expect(texts[5]).toMatch(/"error"/);
    // Served by the account's own key (no charge), and one its client leaves midway.
    upstream.queue({ kind: "sse", steps: wordSteps(40) });
    const own = await post(gw, "/v1/chat/completions", stream("own-gpt", "own key"));
    expect(count(await own.text())).toBe(40);
    const gate = deferred();
    upstream.queue({ kind: "sse", steps: gatedSteps(60, 40, gate.promise) });
    const leaving = new AbortController();
    const left = await post(
      gw,
      "/v1/chat/completions",
      stream("up-gpt", "left"),
      undefined,
      leaving.signal,
    );
    const { text: seen } = await readUntil(left, 40);
    expect(count(seen)).toBe(40);
    leaving.abort();
    gate.resolve();
    await idleMoney(gw);
    const freeUsed = (await quota(gw)).free.daily_used;
    gw.services.ledger.flush();
    const rows = requestLogOnDisk(db);
    const balance = balanceOnDisk(db, "acct");
    // Each stream's own settlement, never its mark.
    expect(rows.filter((r) => r.state === "interrupted")).toEqual([]);
    expect(rows.find((r) => r.model === "own-gpt")).toMatchObject({
      payment: "byok",
      cost_micro: 0,
    });

    await gw.close();
    const again = await start(db, () => at);
    expect((await quota(again)).free.daily_used).toBe(freeUsed);
    await again.close();
    expect(requestLogOnDisk(db)).toEqual(rows);
    expect(balanceOnDisk(db, "acct")).toBe(balance);
  }, 30_000);

  it("a thousand streams leave a journal no longer than its bound, and a start after them applies none of their marks", async () => {
    const db = join(freshDir(), "gateway.db");
    const gw = await start(db);
    const journal = `${db}-settlements`;
    let largest = 0;
    for (let round = 0; round < 125; round++) {
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          // Marked five times each (16, 32, 64, 128 and 256 tokens): over 2 MiB of marks in all.
          const res = await post(
            gw,
            "/v1/chat/completions",
            stream("mock-gpt", "[[mock:words=130]]"),
          );
          expect(await res.text()).toContain("[DONE]");
        }),
      );
      largest = Math.max(largest, statSync(journal).size);
    }
    // Started over once past 1 MiB (what lands meanwhile aside), keeping only the marks of
    // streams still running.
    expect(largest).toBeLessThan(1.5 * 1024 * 1024);
    gw.services.ledger.flush();
    const balance = balanceOnDisk(db, "acct");
    const rows = requestLogOnDisk(db).length;
    await gw.close();
    await (await start(db)).close();
    expect(balanceOnDisk(db, "acct")).toBe(balance);
    expect(requestLogOnDisk(db)).toHaveLength(rows);
  }, 60_000);

  it("a stream whose settlement the database refused is not charged by its marks at the next start (its client was told nothing was charged)", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const db = join(freshDir(), "gateway.db");
    const gw = await start(db);
    const initial = balanceOnDisk(db, "acct");
    // A slow request keeps the ledger's batch open, so the stream's charge waits for a commit ...
    const slow = post(gw, "/v1/chat/completions", chat("slow [[mock:delay=2000]]"));
    for (let i = 0; i < 250 && gw.services.ledger.heldMicro("acct") === 0; i++) await sleep(20);
    // ... which the database refuses (as a filesystem remounted read-only).
    gw.services.store.database.pragma("query_only = ON");
    const res = await post(gw, "/v1/chat/completions", stream("mock-gpt", "[[mock:words=60]]"));
    const id = res.headers.get("x-request-id");
    const text = await res.text();
    expect(text).not.toContain("[DONE]");
    expect(text).toMatch(/"code":"storage_unavailable"/);
    expect(text).toMatch(/nothing was charged/);
    const slowAnswer = await slow;
    await slowAnswer.text();
    gw.services.store.database.pragma("query_only = OFF");
    await gw.close();

    await (await start(db)).close();
    const rows = requestLogOnDisk(db);
    expect(rows.filter((r) => r.id === id)).toEqual([]);
    const spent = rows.reduce((sum, r) => sum + r.cost_micro, 0);
    expect(balanceOnDisk(db, "acct")).toBe(initial - spent);
    expect(rows.map((r) => r.stream)).toEqual(slowAnswer.status === 200 ? [0] : []);
  }, 30_000);
});

/** A database for `backend`: a file in a fresh directory, or a fresh database on the run's server. */
async function databaseFor(backend: (typeof backends)[number]): Promise<string> {
  return backend === "sqlite" ? join(freshDir(), "gateway.db") : createTestDatabase();
}

/**
 * The storage refuses the `nth` delivery mark written from now on, as a full disk refuses the
 * journal's line (SQLite) or a dropped connection the row's insert (Postgres). Returns the undo.
 */
function refuseMark(backend: (typeof backends)[number], nth: number): () => void {
  let marks = 0;
  if (backend === "sqlite") {
    const append = SettlementJournal.prototype.append;
    SettlementJournal.prototype.append = function (this: SettlementJournal, lines: string) {
      if (lines.startsWith('{"kind":"mark"') && ++marks === nth)
        throw Object.assign(new Error("ENOSPC: no space left on device, write"), {
          code: "ENOSPC",
        });
      append.call(this, lines);
    };
    return () => {
      SettlementJournal.prototype.append = append;
    };
  }
  const query = pg.Pool.prototype.query;
  pg.Pool.prototype.query = function (this: pg.Pool, ...args: unknown[]) {
    const statement = args[0] as { name?: string } | string;
    if (
      typeof statement === "object" &&
      statement.name === "gateway_mark_delivery" &&
      ++marks === nth
    )
      return Promise.reject(new Error("Connection terminated unexpectedly"));
    return (query as (...values: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  return () => {
    pg.Pool.prototype.query = query;
  };
}

describe.each(backends)("a stream whose delivery mark the storage refuses (%s)", (backend) => {
  it("ends with storage_unavailable before the piece it would pay for, and is charged nothing, then or after a restart", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const db = await databaseFor(backend);
    const gw = await start(db);
    const before = await money(gw);
    upstream.queue({ kind: "sse", steps: wordSteps(40) });
    // The first mark covers 16 tokens; the one before the 17th is refused.
    const undo = refuseMark(backend, 2);
    let text: string;
    let id: string | null;
    try {
      const res = await post(gw, "/v1/chat/completions", stream("up-gpt", "refused midway"));
      id = res.headers.get("x-request-id");
      text = await res.text();
    } finally {
      undo();
    }
    expect(count(text)).toBe(16);
    expect(text).not.toContain("[DONE]");
    expect(text).toMatch(/"code":"storage_unavailable"/);
    expect(text).toMatch(/nothing was charged/);
    expect(await idleMoney(gw)).toEqual(before);
    expect(await gw.services.store.requestOf("acct", id!)).toMatchObject({
      state: "failed",
      cost_micro: 0,
      error_code: "storage_unavailable",
    });
    await gw.close();
    const again = await start(db);
    expect(await money(again)).toEqual(before);
    expect(await again.services.store.requestOf("acct", id!)).toMatchObject({ cost_micro: 0 });
  }, 30_000);
});

describe("a stream whose settlement cannot reach Postgres", () => {
  it("is not charged by its delivery marks when its gateway leaves (its client was told nothing was charged)", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const url = await createTestDatabase();
    const relay = await relayTo(url);
    try {
      const gw = await start(relay.url);
      const before = await money(gw);
      const gate = deferred();
      upstream.queue({ kind: "sse", steps: gatedSteps(21, 20, gate.promise) });
      const res = await post(gw, "/v1/chat/completions", stream("up-gpt", "cut off"));
      const id = res.headers.get("x-request-id");
      // Marked up to 32 tokens by now; the database goes away before the stream settles.
      const { rest } = await readUntil(res, 20);
      await relay.cut();
      gate.resolve();
      const text = await rest;
      expect(count(text)).toBe(21);
      expect(text).not.toContain("[DONE]");
      expect(text).toMatch(/"code":"storage_unavailable"/);
      await relay.mend();
      await gw.close();
      const db = new pg.Client({ connectionString: url });
      await db.connect();
      try {
        const logged = await db.query("SELECT state, cost_micro FROM request_log WHERE id = $1", [
          id,
        ]);
        expect(logged.rows).toEqual([]);
        const { rows } = await db.query(
          "SELECT balance_micro::bigint AS balance, held_micro::bigint AS held FROM accounts WHERE id = 'acct'",
        );
        expect({ balance: Number(rows[0].balance), held: Number(rows[0].held) }).toEqual(before);
        expect((await db.query("SELECT id FROM deliveries")).rows).toEqual([]);
      } finally {
        await db.end();
      }
    } finally {
      await relay.close();
    }
  }, 30_000);
});

interface Listed {
  id: string;
  model: string;
  payment: string;
  cost_idr: number;
  input_tokens: number;
  output_tokens: number;
  state: string;
}

/** Every request of the key's account, walked page by page through `/v1/usage/requests`. */
async function walk(gw: TestGateway, order: "asc" | "desc"): Promise<Listed[]> {
  const rows: Listed[] = [];
  let after: string | undefined;
  for (;;) {
    const query = `limit=4&order=${order}${after ? `&after=${after}` : ""}`;
    const res = await fetch(`${gw.url}/v1/usage/requests?${query}`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status, query).toBe(200);
    const page = (await res.json()) as { data: Listed[]; last_id: string; has_more: boolean };
    rows.push(...page.data);
    if (!page.has_more) return rows;
    after = page.last_id;
  }
}

describe.each(backends)("own keys, the pool and the usage walk (%s)", (backend) => {
  it("an own key's answers cost nothing and are byok; a refused own key's request is the pool's, charged as one; a walk of the usage listing sums to the balance's drop, across a clock moved back", async () => {
    let t = 1_800_000_000_000;
    const db = await databaseFor(backend);
    const gw = await start(db, () => t);
    await linkOwnKey(gw, "own", OWN_KEY);
    await linkOwnKey(gw, "up", REFUSED_OWN_KEY);
    const initial = (await money(gw)).balance;
    const sentBefore = upstream.requests.length;
    const whole = (model: string) => post(gw, "/v1/chat/completions", chat("whole", model));
    const streamed = async (model: string) => {
      const res = await post(gw, "/v1/chat/completions", stream(model, "streamed"));
      expect(await res.text()).toContain("[DONE]");
    };

    for (const model of ["own-gpt", "up-gpt"]) {
      for (let i = 0; i < 2; i++) expect((await whole(model)).status).toBe(200);
      await streamed(model);
      // The clock moved back: later requests are logged before the earlier ones.
      t -= 3_600_000;
      // Several at once: settled together (a Postgres batch, or from a lease).
      const together = await Promise.all([
        ...Array.from({ length: 6 }, () => whole(model)),
        streamed(model),
        streamed(model),
      ]);
      for (const res of together) if (res) expect(res.status).toBe(200);
      t += 1;
    }
    // An own-key stream its client leaves midway: settled for what it delivered (nothing).
    const gate = deferred();
    upstream.queue({ kind: "sse", steps: gatedSteps(40, 20, gate.promise) });
    const leaving = new AbortController();
    const left = await post(
      gw,
      "/v1/chat/completions",
      stream("own-gpt", "left midway"),
      undefined,
      leaving.signal,
    );
    await readUntil(left, 20);
    leaving.abort();
    gate.resolve();
    await idleMoney(gw);
    const made = 2 * (2 + 1 + 8) + 1;
    const seen = upstream.requests.slice(sentBefore).map(credentialSeen);
    // Each own-gpt request went to the own key; each up-gpt one to the refused own key, then the pool.
    expect(seen.filter((key) => key === OWN_KEY)).toHaveLength(12);
    expect(seen.filter((key) => key === REFUSED_OWN_KEY)).toHaveLength(11);
    expect(seen.filter((key) => key === "sk-pool-up")).toHaveLength(11);

    const listed = await walk(gw, "desc");
    expect(listed).toHaveLength(made);
    expect(new Set(listed.map((r) => r.id)).size).toBe(made);
    expect((await walk(gw, "asc")).map((r) => r.id)).toEqual(listed.map((r) => r.id).reverse());
    for (const r of listed.filter((r) => r.model === "own-gpt"))
      expect(r).toMatchObject({ payment: "byok", cost_idr: 0, state: "settled" });
    for (const r of listed.filter((r) => r.model === "up-gpt")) {
      expect(r).toMatchObject({
        payment: "balance",
        state: "settled",
        input_tokens: INPUT_REPORTED,
      });
      expect(Math.round(r.cost_idr * 1e6)).toBe(INPUT_REPORTED * IN + r.output_tokens * OUT);
    }
    const spent = listed.reduce((sum, r) => sum + Math.round(r.cost_idr * 1e6), 0);
    expect(spent).toBeGreaterThan(0);
    expect(await idleMoney(gw)).toEqual({ balance: initial - spent, held: 0 });
    if (backend === "postgres") {
      const client = new pg.Client({ connectionString: db });
      await client.connect();
      try {
        expect((await client.query("SELECT id FROM deliveries")).rows).toEqual([]);
      } finally {
        await client.end();
      }
    }
  }, 30_000);
});

describe.each(backends)("a subscriber's own key (%s)", (backend) => {
  it("serves without using the plan: only the pool's answers count against its window", async () => {
    const gw = await start(await databaseFor(backend));
    await linkOwnKey(gw, "own", OWN_KEY, "sub");
    const sub = { authorization: `Bearer ${SUB_KEY}` };
    const ask = (model: string, extra: object = {}) =>
      post(gw, "/v1/chat/completions", chat("hi", model, extra), sub);
    const used = async () => (await quota(gw, SUB_KEY)).subscription!.windows[0].used;

    // More own-key answers than the plan holds, whole and streamed: none is the plan's.
    for (const extra of [{}, { stream: true }, {}]) {
      const res = await ask("own-gpt", extra);
      expect(res.status).toBe(200);
      await res.text();
    }
    expect(await used()).toBe(0);
    const listed = await fetch(`${gw.url}/v1/usage/requests`, { headers: sub });
    const rows = ((await listed.json()) as { data: Listed[] }).data;
    expect(rows.map((r) => [r.payment, r.cost_idr])).toEqual(Array(3).fill(["byok", 0]));

    // The pool's answers are the plan's, up to its quota.
    for (let i = 0; i < 2; i++) expect((await ask("up-gpt")).status).toBe(200);
    expect(await used()).toBe(2);
    const over = await ask("up-gpt");
    expect(over.status).toBe(429);
    expect(await over.json()).toMatchObject({ error: { code: "plan_limit_reached" } });
  });
});

describe("an anthropic-wire stream with cached input, left midway", () => {
  it("is charged its cached and written input once, at the input price, and what it delivered, in the messages and chat styles", async () => {
    const anthropic = await fakeUpstream("anthropic");
    try {
      const base = config();
      const gw = await testGateway({
        config: {
          ...base,
          providers: [
            ...base.providers!,
            { id: "an", wire: "anthropic", base_url: anthropic.baseUrl, api_keys: ["sk-ant-pool"] },
          ],
          models: [
            ...base.models!,
            {
              name: "an-claude",
              provider: "an",
              price_input_per_mtok: IN,
              price_output_per_mtok: OUT,
            },
          ],
        },
      });
      open.push(gw);
      for (const style of ["messages", "chat"] as const) {
        const gate = deferred();
        const steps = anthropicStreamSteps(
          Array.from({ length: 30 }, () => WORD),
          { usage: [10, 30] },
        );
        // Anthropic's message_start: uncached input apart from the cache's reads and writes.
        const start = steps[0].data as { message: { usage: Record<string, number> } };
        start.message.usage = {
          input_tokens: 10,
          cache_read_input_tokens: 100,
          cache_creation_input_tokens: 50,
          output_tokens: 1,
        };
        // Steps 0-2 open the message and its block: the deltas start at 3.
        steps[3 + 20] = { ...steps[3 + 20], gate: gate.promise };
        anthropic.queue({ kind: "sse", steps });
        const leaving = new AbortController();
        const body =
          style === "messages"
            ? {
                model: "an-claude",
                max_tokens: 500,
                stream: true,
                messages: [{ role: "user", content: "hi" }],
              }
            : stream("an-claude", "hi");
        const res = await post(
          gw,
          style === "messages" ? "/v1/messages" : "/v1/chat/completions",
          body,
          undefined,
          leaving.signal,
        );
        const id = res.headers.get("x-request-id")!;
        await readUntil(res, 20);
        leaving.abort();
        gate.resolve();
        const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
        expect(row, style).toMatchObject({ input_tokens: 160, error_code: "client_closed" });
        // At least what reached the client; never more than the provider wrote.
        expect(row!.output_tokens, style).toBeGreaterThanOrEqual(20);
        expect(row!.output_tokens, style).toBeLessThanOrEqual(30);
        expect(row!.cost_micro, style).toBe(160 * IN + row!.output_tokens * OUT);
      }
    } finally {
      await anthropic.close();
    }
  }, 30_000);
});
