import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { formatIdr } from "../src/server/dashboard/pages.js";
import { quota } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import { deferred, type FakeUpstream, fakeUpstream, openaiJson } from "./support/fake-upstream.js";
import {
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/**
 * The quota tells a client what it can spend: its balance less what is held. A request whose
 * worst case fits in that is admitted, whatever is in flight and on whichever gateway of the
 * database it is sent to; on Postgres a gateway leases part of a balance, and a lease's money is
 * held until it comes back.
 */

/** A whole IDR per output token and nothing per input token: a request's worst case is its `max_tokens` in IDR. */
const MODEL = "dear";

let upstream: FakeUpstream;
/** Released by each test: the request that stays in flight meanwhile. */
let gate = deferred();

beforeAll(async () => {
  upstream = await fakeUpstream("openai", async (req) => {
    const messages = req.body.messages as { content: string }[];
    if (messages[0]?.content === "in flight") await gate.promise;
    return openaiJson("ok", { usage: [1, 1] });
  });
});
afterAll(async () => {
  gate.resolve();
  await upstream?.close();
});

const open: TestGateway[] = [];
afterEach(async () => {
  gate.resolve();
  for (const gw of open.splice(0).reverse()) await gw.close();
  upstream.requests.length = 0;
  gate = deferred();
});

function config(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-up"] }],
    models: [
      {
        name: MODEL,
        provider: "up",
        upstream_model: "dear-up",
        price_output_per_mtok: 1_000_000,
        max_output_tokens: 1_000,
      },
    ],
    accounts: (accounts) =>
      accounts.map((account) =>
        account.id === "acct" ? { ...account, balance_idr: 100 } : account,
      ),
  });
}

const ask = (gw: { url: string }, content: string, maxTokens: number) =>
  post(gw, "/v1/chat/completions", chat(content, MODEL, { max_tokens: maxTokens }));

/** What the quota says the account can spend, in whole IDR (a request's worst case that fits). */
async function spendableIdr(gw: { url: string }): Promise<number> {
  const shown = await quota(gw);
  const micro = Math.round(shown.balance_idr * 1e6) - Math.round(shown.held_idr * 1e6);
  return Math.floor(micro / 1e6);
}

/**
 * One answered request (on Postgres its hold leases the gateway part of the balance), then one
 * held in flight by the upstream, both sent to `gw`: resolves once the second reached the upstream.
 */
async function oneAnsweredOneInFlight(gw: TestGateway): Promise<{ inFlight: Promise<Response> }> {
  expect((await ask(gw, "first", 3)).status).toBe(200);
  const inFlight = ask(gw, "in flight", 3);
  await expect.poll(() => upstream.requests.length, { timeout: 5_000 }).toBe(2);
  return { inFlight };
}

describe.each(backends)("what the quota says can be spent (%s)", (backend) => {
  it("admits a request whose worst case is all the quota says can be spent, another one in flight", async () => {
    const gw = await gatewayOn(backend, { config: config() });
    open.push(gw);
    const { inFlight } = await oneAnsweredOneInFlight(gw);
    const spendable = await spendableIdr(gw);
    expect(spendable).toBeGreaterThan(50);
    const probe = await ask(gw, "all of it", spendable);
    expect(probe.status, await probe.clone().text()).toBe(200);
    gate.resolve();
    expect((await inFlight).status).toBe(200);
  });
});

describe("what the quota says can be spent, on another gateway of the database (postgres)", () => {
  it("admits a request whose worst case is all the quota says can be spent, while the other gateway has a request in flight from its lease", async () => {
    const first = await gatewayOn("postgres", { config: config() });
    open.push(first);
    const second = await testGateway({ config: config(), db: first.dbPath });
    open.push(second);
    const { inFlight } = await oneAnsweredOneInFlight(first);
    const spendable = await spendableIdr(second);
    expect(spendable).toBeGreaterThan(50);
    // The owner's dashboard there holds what the quota holds.
    const page = await fetch(`${second.url}/dashboard`, {
      headers: { cookie: (await ownerSession(second)).cookie },
    });
    const held = /<span id="held">([^<]*)<\/span>/.exec(await page.text())?.[1];
    expect(held).toBe(formatIdr((await quota(second)).held_idr));
    const probe = await ask(second, "all of it", spendable);
    expect(probe.status, `quota said ${spendable} IDR: ${await probe.clone().text()}`).toBe(200);
    gate.resolve();
    expect((await inFlight).status).toBe(200);
  });
});
