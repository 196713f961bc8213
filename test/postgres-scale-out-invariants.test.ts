import { afterAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { baseConfigWith, post } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import type { ServeProcess } from "./support/serve-process.js";
import { streamEvents } from "./support/sse.js";

/**
 * The scale-out promise as a property: two real `gateway serve` processes on one Postgres
 * database, many concurrent clients on every payment path (a funded balance, PAYG, a subscription,
 * a `:free` model with a token budget, an account's own provider key), all three styles whole and
 * streamed, `n: 2`, clients that hang up at chosen points, and one gateway SIGKILLed midway (its
 * cut streams settled by the survivor's reaper). Whatever the interleaving, once everything has
 * settled the database owes nobody anything: every charge is a request_log row, every request the
 * clients saw admitted is exactly one row, and every allowance counts exactly its rows.
 *
 * The requests are drawn from fixed seeds; which of them a gateway serves when is the machine's.
 */

const SEED = 0x5eed_2026;
const CLIENTS = 16;
/** Requests finished by the clients before the kill, and after it on the survivor. */
const BEFORE_KILL = 400;
const AFTER_KILL = 200;

const KEYS = {
  paid: "kn-pgprop-paid-key-000000000000",
  payg: "kn-pgprop-payg-key-000000000000",
  sub: "kn-pgprop-sub-key-0000000000000",
  free: "kn-pgprop-free-key-000000000000",
  byok: "kn-pgprop-byok-key-000000000000",
} as const;
type Account = keyof typeof KEYS;
const accounts = Object.keys(KEYS) as Account[];

const PAID_MODEL = "paced";
const FREE_MODEL = "budget:free";
/** The same two at a word every 100 ms: the streams the kill cuts are still running then. */
const SLOW_PAID_MODEL = "slow";
const SLOW_FREE_MODEL = "slow-budget:free";
const budgetModels = [FREE_MODEL, SLOW_FREE_MODEL];
/** Run out by the load late in the run: later free requests are refused for it. */
const FREE_BUDGET = 4_000;
/** The slow free model's: its stream cut by the kill is admitted whatever the load used. */
const SLOW_FREE_BUDGET = 1_000_000;
/** One window for the whole run: the count compared is the rows' sum, not a window's share. */
const FREE_WINDOW_SECONDS = 1_000_000_000;

const initialBalanceIdr: Record<Account, number> = {
  paid: 1_000_000,
  // A few requests from the balance, then PAYG up to a limit the load reaches.
  payg: 6,
  sub: 0,
  free: 0,
  // About two requests' holds: concurrent ones fall back to the account's own key.
  byok: 5,
};

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "paced", wire: "mock", mock: { chunk_interval_ms: 8 } },
      { id: "slow", wire: "mock", mock: { chunk_interval_ms: 100 } },
    ],
    models: [
      ...[
        [PAID_MODEL, "paced"],
        [SLOW_PAID_MODEL, "slow"],
      ].map(([name, provider]) => ({
        name,
        provider,
        upstream_model: "mock-gpt",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      })),
      ...(
        [
          [FREE_MODEL, "paced", FREE_BUDGET],
          [SLOW_FREE_MODEL, "slow", SLOW_FREE_BUDGET],
        ] as const
      ).map(([name, provider, tokens]) => ({
        name,
        provider,
        upstream_model: "mock-gpt",
        free_token_budget: { tokens, window_seconds: FREE_WINDOW_SECONDS },
      })),
    ],
    tiers: {
      free: { free_rpm: 100_000, free_daily: 120, burst_spacing_ms: 0 },
    },
    accounts: () => [
      {
        id: "paid",
        balance_idr: initialBalanceIdr.paid,
        rpm_limit: 100_000,
        keys: [{ id: "k-paid", value: KEYS.paid }],
      },
      {
        id: "payg",
        balance_idr: initialBalanceIdr.payg,
        rpm_limit: 100_000,
        payg: { enabled: true, limit_idr: 60, window_seconds: 86_400 },
        keys: [{ id: "k-payg", value: KEYS.payg }],
      },
      {
        id: "sub",
        balance_idr: initialBalanceIdr.sub,
        rpm_limit: 100_000,
        subscription: {
          plan: "pro",
          // Started a minute ago: neither window rolls over during the run.
          started_at: Date.now() - 60_000,
          windows: [
            { name: "1h", seconds: 3_600, quota: 70 },
            { name: "1d", seconds: 86_400, quota: 1_000 },
          ],
          payg_fallback: false,
          free_fallback: false,
        },
        keys: [{ id: "k-sub", value: KEYS.sub }],
      },
      {
        id: "free",
        balance_idr: initialBalanceIdr.free,
        keys: [{ id: "k-free", value: KEYS.free }],
      },
      {
        id: "byok",
        balance_idr: initialBalanceIdr.byok,
        rpm_limit: 100_000,
        byok: [
          { provider: "paced", key: "sk-own-provider-key-0000" },
          { provider: "slow", key: "sk-own-provider-key-0000" },
        ],
        keys: [{ id: "k-byok", value: KEYS.byok }],
      },
    ],
  });
}

/** mulberry32: the same seed draws the same requests on every run. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

type Style = "chat" | "messages" | "responses";
type HangUp = { after: "none" } | { after: "events"; events: number } | { after: "ms"; ms: number };

interface Plan {
  account: Account;
  model: string;
  gateway: number;
  style: Style;
  stream: boolean;
  n: number;
  words: number;
  maxTokens: number;
  directive: "" | "fail" | "break" | "delay";
  hangUp: HangUp;
}

/** What one request's client saw. */
interface Seen {
  plan: Plan;
  id?: string;
  /** Undefined: no answer came (the client left, or the gateway died, before the headers). */
  status?: number;
  code?: string;
  /** The whole body, or a stream's closing event, arrived. */
  finished: boolean;
  /** Content deltas the client read. */
  deltas: number;
  /** A whole answer's output tokens as its body reported them. */
  outputTokens?: number;
}

function draw(next: () => number, gateways: number[]): Plan {
  const pick = <T>(items: readonly T[]) => items[Math.floor(next() * items.length)];
  const account = pick(accounts);
  const style = pick(["chat", "messages", "responses"] as const);
  const stream = next() < 0.6;
  const roll = next();
  // A hang-up within a few milliseconds comes while admission waits on the database.
  const hangUp: HangUp =
    roll < 0.15
      ? { after: "events", events: 1 + Math.floor(next() * 12) }
      : roll < 0.3
        ? { after: "ms", ms: Math.floor(next() * (next() < 0.5 ? 6 : 40)) }
        : { after: "none" };
  const directive = pick(["", "", "", "", "", "", "", "fail", "break", "delay"] as const);
  const free = account === "free" || (account === "byok" && next() < 0.4);
  return {
    account,
    model: free ? FREE_MODEL : PAID_MODEL,
    gateway: pick(gateways),
    style,
    stream,
    n: style === "chat" && next() < 0.3 ? 2 : 1,
    words: 4 + Math.floor(next() * 90),
    maxTokens: 200,
    directive: directive === "break" && !stream ? "" : directive,
    hangUp,
  };
}

function body(plan: Plan, tag: string): object {
  const directives = [`[[mock:words=${plan.words}]]`];
  if (plan.directive === "fail") directives.push("[[mock:fail=503]]");
  if (plan.directive === "break") directives.push("[[mock:break=4]]");
  if (plan.directive === "delay") directives.push("[[mock:delay=150]]");
  const text = `${tag} ${directives.join(" ")}`;
  const { model, maxTokens } = plan;
  const stream = plan.stream ? { stream: true } : {};
  if (plan.style === "chat")
    return {
      model,
      messages: [{ role: "user", content: text }],
      max_tokens: maxTokens,
      ...(plan.n > 1 && { n: plan.n }),
      ...stream,
    };
  if (plan.style === "messages")
    return { model, max_tokens: maxTokens, messages: [{ role: "user", content: text }], ...stream };
  return { model, input: text, max_output_tokens: maxTokens, ...stream };
}

const paths: Record<Style, string> = {
  chat: "/v1/chat/completions",
  messages: "/v1/messages",
  responses: "/v1/responses",
};

// biome-ignore lint/suspicious/noExplicitAny: events read loosely, by style
type Json = any;

function contentDeltas(style: Style, event: string | undefined, data: Json): number {
  if (data === "[DONE]") return 0;
  if (style === "chat")
    return (data.choices ?? []).filter(
      (c: Json) => typeof c.delta?.content === "string" && c.delta.content,
    ).length;
  if (style === "messages") return event === "content_block_delta" && data.delta?.text ? 1 : 0;
  return event === "response.output_text.delta" && data.delta ? 1 : 0;
}

function closes(style: Style, event: string | undefined, data: Json): boolean {
  if (style === "chat") return data === "[DONE]";
  if (style === "messages") return event === "message_stop";
  return event === "response.completed" || event === "response.incomplete";
}

function outputTokens(style: Style, answer: Json): number | undefined {
  if (style === "chat") return answer.usage?.completion_tokens;
  return answer.usage?.output_tokens;
}

/** One request as its client makes it, hanging up where its plan says; `seen` fills as it goes. */
async function request(gateway: ServeProcess, seen: Seen, tag: string): Promise<void> {
  const { plan } = seen;
  const controller = new AbortController();
  const timer =
    plan.hangUp.after === "ms" ? setTimeout(() => controller.abort(), plan.hangUp.ms) : undefined;
  try {
    const res = await post(
      gateway,
      paths[plan.style],
      body(plan, tag),
      { authorization: `Bearer ${KEYS[plan.account]}` },
      controller.signal,
    );
    seen.status = res.status;
    seen.id = res.headers.get("x-request-id") ?? undefined;
    if (res.status !== 200) {
      const answer = (await res.json()) as Json;
      seen.code = answer.error?.code ?? answer.error?.type;
      seen.finished = true;
      return;
    }
    if (!plan.stream) {
      const answer = (await res.json()) as Json;
      seen.outputTokens = outputTokens(plan.style, answer);
      seen.finished = true;
      return;
    }
    let events = 0;
    for await (const { event, data } of streamEvents(res)) {
      events++;
      seen.deltas += contentDeltas(plan.style, event, data);
      if (closes(plan.style, event, data)) seen.finished = true;
      if (plan.hangUp.after === "events" && events >= plan.hangUp.events) {
        controller.abort();
        break;
      }
    }
  } catch {
    // The client hung up, or the gateway died under it.
  } finally {
    clearTimeout(timer);
  }
}

let cluster: GatewaysOnPostgres | undefined;
afterAll(async () => {
  await cluster?.stop();
});

interface LogRow {
  id: string;
  account_id: string;
  model: string;
  state: string;
  payment: string;
  payment_ref: string | null;
  reserved_micro: number;
  cost_micro: number;
  input_tokens: number;
  output_tokens: number;
  error_code: string | null;
  stream: number;
}

describe("two gateways on one Postgres under mixed load, one SIGKILLed midway", () => {
  it("loses and double-counts nothing: balances, PAYG, subscription windows, the free day and the free token budget equal their request_log rows, one row per request", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const db = cluster;
    const [survivor, doomed] = db.gateways;
    const seen: Seen[] = [];
    let live = [0, 1];

    // Streams still running when the kill comes, one per payment path (the account's own key
    // twice: instead of a hold it could not pay, and serving a free model), and whole requests
    // still waiting for their provider: the dead gateway leaves marks, holds and leases behind.
    const longStream = (account: Account, model: string, style: Style): Plan => ({
      account,
      model,
      gateway: 1,
      style,
      stream: true,
      n: 1,
      words: 5_000,
      maxTokens: 1_000,
      directive: "",
      hangUp: { after: "none" },
    });
    const cutPlans = [
      longStream("paid", SLOW_PAID_MODEL, "chat"),
      longStream("payg", SLOW_PAID_MODEL, "messages"),
      longStream("sub", SLOW_PAID_MODEL, "responses"),
      longStream("free", SLOW_FREE_MODEL, "chat"),
      longStream("byok", SLOW_PAID_MODEL, "messages"),
      longStream("byok", SLOW_FREE_MODEL, "responses"),
    ];
    /** A request of `plan` on `gateway`, its client's view listed from the start. */
    const send = (gateway: ServeProcess, plan: Plan, tag: string) => {
      const one: Seen = { plan, finished: false, deltas: 0 };
      seen.push(one);
      return { one, done: request(gateway, one, tag) };
    };
    const cut = cutPlans.map((plan, i) => send(doomed, plan, `cut ${i}`));
    const waiting = (["paid", "payg", "sub", "free"] as const).map(
      (account) =>
        send(
          doomed,
          {
            ...longStream(account, account === "free" ? FREE_MODEL : PAID_MODEL, "chat"),
            stream: false,
            words: 5,
            maxTokens: 50,
          },
          "waiting [[mock:delay=60000]]",
        ).done,
    );

    let finished = 0;
    let stopped = false;
    const loops = Array.from({ length: CLIENTS }, async (_, client) => {
      const next = random(SEED + client);
      for (let i = 0; !stopped; i++) {
        const plan = draw(next, live);
        await send(db.gateways[plan.gateway], plan, `c${client}.${i}`).done;
        finished++;
      }
    });

    await eventually(
      async () => finished,
      (n) => n >= BEFORE_KILL,
      60_000,
      "requests before the kill",
    );
    // One more, admitted from the dead gateway's lease of the paid account: the load keeps it in
    // use, and this one's worst case is the load's.
    cut.push(
      send(
        doomed,
        { ...longStream("paid", SLOW_PAID_MODEL, "chat"), maxTokens: 200 },
        "cut leased",
      ),
    );
    await eventually(
      async () => cut.map(({ one }) => one.deltas),
      (deltas) => deltas.every((n) => n > 0),
      20_000,
      "the long streams delivering before the kill",
    );
    await killByPid(doomed);
    // The balancer takes the dead gateway out: later requests go to the survivor.
    live = [0];
    const atKill = finished;
    await eventually(
      async () => finished,
      (n) => n >= atKill + AFTER_KILL,
      60_000,
      "requests on the survivor after the kill",
    );
    stopped = true;
    await Promise.all([...loops, ...cut.map(({ done }) => done), ...waiting]);

    // Everything settles: the survivor's reaper applies the dead gateway's marks and releases its
    // holds and leases once its lease ran out; the survivor gives its own leases back when idle
    // (a lease given back keeps its row, drained).
    await eventually(
      () =>
        db.sql<{
          holds: number;
          deliveries: number;
          leases: number;
          held: number;
          instances: number;
        }>(
          `SELECT (SELECT count(*) FROM holds)::int AS holds,
             (SELECT count(*) FROM deliveries)::int AS deliveries,
             (SELECT count(*) FROM leases WHERE active OR money_micro <> 0 OR kept_micro <> 0)::int
               AS leases,
             (SELECT coalesce(sum(held_micro + leased_micro + payg_held_micro), 0) FROM accounts)::bigint AS held,
             (SELECT count(*) FROM instances)::int AS instances`,
        ),
      ([left]) =>
        left.holds === 0 &&
        left.deliveries === 0 &&
        left.leases === 0 &&
        left.held === 0 &&
        left.instances === 1,
      45_000,
      "holds, marks and leases left once everything settled",
    ).catch(async (err: Error) => {
      const left = await db.sql(
        `SELECT 'hold' AS kind, row_to_json(h)::text AS row FROM holds h
         UNION ALL SELECT 'delivery', row_to_json(d)::text FROM deliveries d
         UNION ALL SELECT 'lease', row_to_json(l)::text FROM leases l
         UNION ALL SELECT 'instance', row_to_json(i)::text FROM instances i`,
      );
      const ids = await db.sql<{ id: string }>("SELECT id FROM holds");
      const clients = seen.filter((one) => ids.some((row) => row.id === one.id));
      err.message += `\n${JSON.stringify(left, null, 1)}\n${JSON.stringify(clients, null, 1)}\n${db.stderr().slice(-4_000)}`;
      throw err;
    });
    expect(survivor.child.exitCode, db.stderr()).toBeNull();

    const rows = await db.sql<LogRow>(
      `SELECT id, account_id, model, state, payment, payment_ref, reserved_micro, cost_micro,
         input_tokens, output_tokens, error_code, stream FROM request_log`,
    );
    const context = (what: string, extra?: unknown) =>
      `${what}\n${JSON.stringify(extra ?? null)}\n${db.stderr().slice(-4_000)}`;

    // One row per request, none twice.
    const byId = new Map<string, LogRow[]>();
    for (const row of rows) byId.set(row.id, [...(byId.get(row.id) ?? []), row]);
    const twice = [...byId.values()].filter((same) => same.length > 1);
    expect(twice, context("request ids logged twice", twice)).toEqual([]);

    const accountOf = (id: string | undefined) => (id ? byId.get(id)?.[0] : undefined);
    const unknown: Seen[] = [];
    for (const one of seen) {
      const row = accountOf(one.id);
      if (one.status === undefined) {
        unknown.push(one);
        continue;
      }
      // Refused at admission (money, a window, the free day, the budget): nothing to log.
      if (one.status === 402 || one.status === 429) {
        expect(row, context("a refused request with a row", one)).toBeUndefined();
        continue;
      }
      // Admitted (answered, or failed by its provider), and the client has its id: exactly its
      // row, of its account.
      expect([200, 503], context("an unexpected status", one)).toContain(one.status);
      expect(row, context("an admitted request without its row", one)).toBeDefined();
      expect(row!.account_id, context("a row of another account", one)).toBe(one.plan.account);
      if (one.status === 200 && !one.plan.stream && one.finished) {
        expect(row, context("a whole answer's row", { one, row })).toMatchObject({
          state: "settled",
          output_tokens: one.outputTokens,
        });
      }
      if (one.status === 200 && one.plan.stream && one.finished) {
        expect(row, context("a finished stream's row", { one, row })).toMatchObject({
          state: "settled",
          error_code: null,
        });
      }
      // Charged for at least what reached the client: each delta is a token at least.
      if (row!.state !== "failed")
        expect(
          row!.output_tokens,
          context("billed less than delivered", { one, row }),
        ).toBeGreaterThanOrEqual(one.deltas);
    }
    // The streams the kill cut after they had delivered: applied by their marks.
    for (const { one } of cut)
      expect(accountOf(one.id), context("a cut stream's row", one)).toMatchObject({
        state: "interrupted",
      });
    // Rows no client has the id of: only requests whose answer never came.
    const seenIds = new Set(seen.map((one) => one.id).filter(Boolean));
    const unseen = rows.filter((row) => !seenIds.has(row.id));
    expect(unseen.length, context("rows of no request", unseen)).toBeLessThanOrEqual(
      unknown.length,
    );
    for (const account of accounts) {
      const made = seen.filter((one) => one.plan.account === account).length;
      expect(rows.filter((row) => row.account_id === account).length).toBeLessThanOrEqual(made);
    }
    // No row charged past its hold; what no hold paid for is charged nothing.
    for (const row of rows) {
      expect(row.cost_micro, context("charged past the hold", row)).toBeLessThanOrEqual(
        row.reserved_micro,
      );
      if (!["balance", "payg"].includes(row.payment))
        expect(row.cost_micro, context("charged without money held", row)).toBe(0);
      if (row.state === "failed") expect(row.cost_micro, context("a failure charged", row)).toBe(0);
    }

    // Money: each account's balance dropped by its balance rows' charges, PAYG spent its PAYG
    // rows' charges; nothing is held.
    const money = await db.sql<{
      id: string;
      balance_micro: number;
      held_micro: number;
      leased_micro: number;
      payg_held_micro: number;
      payg_spent_micro: number;
    }>(
      `SELECT id, balance_micro, held_micro, leased_micro, payg_held_micro, payg_spent_micro
         FROM accounts WHERE id = ANY($1::text[]) ORDER BY id`,
      [accounts],
    );
    const charged = (account: string, payment: string) =>
      rows
        .filter((row) => row.account_id === account && row.payment === payment)
        .reduce((sum, row) => sum + row.cost_micro, 0);
    for (const account of money) {
      const id = account.id as Account;
      expect(
        {
          id,
          dropped: initialBalanceIdr[id] * 1_000_000 - account.balance_micro,
          paygSpent: account.payg_spent_micro,
          held: account.held_micro + account.leased_micro + account.payg_held_micro,
        },
        context("an account's money"),
      ).toEqual({ id, dropped: charged(id, "balance"), paygSpent: charged(id, "payg"), held: 0 });
    }
    const delivered = (row: LogRow) => row.state === "settled" || row.state === "interrupted";

    // Subscription windows: each counts its delivered subscription rows of its current start.
    const windows = await db.sql<{
      window_name: string;
      window_start: number;
      used: number;
      held: number;
    }>(
      "SELECT window_name, window_start, used, held FROM subscription_usage WHERE account_id = 'sub'",
    );
    expect(windows.length).toBe(2);
    for (const window of windows) {
      const counted = rows.filter(
        (row) =>
          row.account_id === "sub" &&
          row.payment === "subscription" &&
          delivered(row) &&
          JSON.parse(row.payment_ref!)[window.window_name] === window.window_start,
      ).length;
      expect({ ...window }, context("a subscription window's count")).toEqual({
        ...window,
        used: counted,
        held: 0,
      });
    }

    // The free day counts the delivered free rows of its day.
    const days = await db.sql<{ account_id: string; day: string; used: number; held: number }>(
      "SELECT account_id, day, used, held FROM free_usage",
    );
    for (const day of days) {
      const counted = rows.filter(
        (row) =>
          row.account_id === day.account_id &&
          row.payment === "free" &&
          row.payment_ref === day.day &&
          delivered(row),
      ).length;
      expect({ ...day }, context("a free day's count")).toEqual({ ...day, used: counted, held: 0 });
    }

    // The free model's token budget counts the tokens of its delivered rows the gateway's own
    // keys served (the account's own key spends none of it).
    for (const model of budgetModels) {
      const [budget] = await db.sql<{ tokens: number }>(
        "SELECT tokens FROM free_token_usage WHERE model = $1",
        [model],
      );
      const budgetRows = rows.filter(
        (row) => row.model === model && row.payment === "free" && delivered(row),
      );
      expect(
        { model, tokens: budget?.tokens ?? 0 },
        context("a free token budget's count"),
      ).toEqual({
        model,
        tokens: budgetRows.reduce((sum, row) => sum + row.input_tokens + row.output_tokens, 0),
      });
    }

    // The mix did reach every path it is meant to cover.
    const payments = new Set(rows.filter(delivered).map((row) => row.payment));
    expect([...payments].sort()).toEqual(["balance", "byok", "free", "payg", "subscription"]);
    expect(seen.some((one) => one.status === 402)).toBe(true);
  }, 180_000);
});
