import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { admin, errorOf } from "./support/api.js";
import { approvalPage, decide } from "./support/cli.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
} from "./support/fake-upstream.js";
import { baseConfigWith, chat, KEY, POOR_KEY, post } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import type { ServeProcess } from "./support/serve-process.js";

/**
 * The multi-instance promises of issue 15, with real `gateway serve` processes on one real
 * Postgres database: money, limits, revocations, jobs and logins hold across the processes as
 * they do inside one.
 */

const EXACT_KEY = "kn-test-exact-balance-key-000000";
const LIMITED_KEY = "kn-test-per-minute-key-000000000";
const SUSPENDED_KEY = "kn-test-to-be-suspended-key-0000";
const LOWERED_KEY = "kn-test-balance-lowered-key-0000";
/** Priced per request only: the worst case held at admission is exactly what is charged. */
const PRICE_IDR = 7;
const EXACT_REQUESTS = 37;
const RPM = 10;
const BYOK_KEY = "sk-account-own-key-4242";
const micro = (idr: number) => idr * 1_000_000;

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function config(upstreamUrl: string): ConfigInput {
  return baseConfigWith({
    providers: [
      {
        id: "byok-prov",
        wire: "openai",
        base_url: upstreamUrl,
        api_keys: ["sk-gateway-pool-key-0000"],
        timeout_ms: 5_000,
      },
    ],
    models: [
      { name: "per-request", provider: "mock", price_per_request: PRICE_IDR },
      {
        name: "byok-model",
        provider: "byok-prov",
        upstream_model: "byok-upstream",
        price_input_per_mtok: 1_000_000,
        price_output_per_mtok: 1_000_000,
        max_output_tokens: 100,
      },
    ],
    accounts: [
      {
        id: "exact",
        balance_idr: EXACT_REQUESTS * PRICE_IDR,
        rpm_limit: 1_000,
        keys: [{ id: "ke", value: EXACT_KEY }],
      },
      {
        id: "limited",
        balance_idr: 1_000_000,
        rpm_limit: RPM,
        keys: [{ id: "kr", value: LIMITED_KEY }],
      },
      {
        id: "lower-me",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "k-lowered", value: LOWERED_KEY }],
      },
      {
        id: "suspend-me",
        balance_idr: 1_000_000,
        keys: [{ id: "kx", value: SUSPENDED_KEY }],
      },
    ],
  });
}

let upstream: FakeUpstream;
let cluster: GatewaysOnPostgres;
let gateways: ServeProcess[];

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  upstream.handle(() => openaiJson("from upstream"));
  cluster = await gatewaysOnPostgres(3, config(upstream.baseUrl));
  gateways = cluster.gateways;
});
afterAll(async () => {
  await cluster?.stop();
  await upstream?.close();
});

const completion = (gateway: ServeProcess, key: string, body: object = chat()) =>
  post(gateway, "/v1/chat/completions", body, bearer(key));

/** The account's money as the database holds it. */
async function money(account: string) {
  const [row] = await cluster.sql<{ balance: number; held: number; payg_held: number }>(
    "SELECT balance_micro AS balance, held_micro AS held, payg_held_micro AS payg_held FROM accounts WHERE id = $1",
    [account],
  );
  return row;
}

async function logStates(account: string) {
  return cluster.sql<{ state: string; n: number; cost: number }>(
    `SELECT state, count(*)::int AS n, sum(cost_micro)::bigint AS cost FROM request_log
      WHERE account_id = $1 GROUP BY state ORDER BY state`,
    [account],
  );
}

describe("money across instances", () => {
  it("a balance for exactly N requests admits exactly N of 100 concurrent requests spread over three gateways", async () => {
    const results = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const res = await completion(
          gateways[i % gateways.length],
          EXACT_KEY,
          chat(`exact ${i}`, "per-request"),
        );
        return res.status === 200 ? { status: 200 } : errorOf(res);
      }),
    );
    const admitted = results.filter((result) => result.status === 200);
    const refused = results.filter((result) => result.status !== 200);
    expect(admitted, cluster.stderr()).toHaveLength(EXACT_REQUESTS);
    expect(refused).toHaveLength(100 - EXACT_REQUESTS);
    for (const refusal of refused)
      expect(refusal, cluster.stderr()).toMatchObject({
        status: 402,
        code: "insufficient_balance",
      });
    // Every answer was committed with its charge before it left: nothing is still held.
    expect(await money("exact")).toEqual({ balance: 0, held: 0, payg_held: 0 });
    expect(await logStates("exact")).toEqual([
      { state: "settled", n: EXACT_REQUESTS, cost: micro(EXACT_REQUESTS * PRICE_IDR) },
    ]);
    const perRequest = await cluster.sql<{ cost_micro: number }>(
      "SELECT DISTINCT cost_micro FROM request_log WHERE account_id = 'exact'",
    );
    expect(perRequest).toEqual([{ cost_micro: micro(PRICE_IDR) }]);
    expect(await cluster.sql("SELECT id FROM holds WHERE account_id = 'exact'")).toEqual([]);
  });
});

/** Waits, if need be, for a minute window with enough of it left for a burst to fit inside it. */
async function freshMinuteWindow(neededMs: number): Promise<void> {
  const intoMinute = Date.now() % 60_000;
  if (intoMinute + neededMs > 60_000)
    await new Promise((resolve) => setTimeout(resolve, 60_000 - intoMinute + 50));
}

describe("limits across instances", () => {
  it("the account's per-minute limit admits exactly its number of 3x as many concurrent requests over three gateways", async () => {
    await freshMinuteWindow(15_000);
    const results = await Promise.all(
      Array.from({ length: 3 * RPM }, async (_, i) => {
        const res = await completion(gateways[i % gateways.length], LIMITED_KEY);
        return res.status === 200 ? { status: 200 } : errorOf(res);
      }),
    );
    expect(results.filter((result) => result.status === 200)).toHaveLength(RPM);
    const limited = results.filter((result) => result.status !== 200);
    expect(limited).toHaveLength(2 * RPM);
    for (const refusal of limited)
      expect(refusal).toMatchObject({ status: 429, code: "rate_limit_exceeded" });
    expect(await logStates("limited")).toEqual([
      { state: "settled", n: RPM, cost: expect.any(Number) },
    ]);
  });
});

describe("changes reach every instance before the next request", () => {
  it("a key revoked on one gateway is refused by the next request on the others", async () => {
    const [first, second, third] = gateways;
    const created = await admin(first, "POST", "/accounts/acct/keys", { label: "across" });
    expect(created.status).toBe(201);
    const key = (await created.json()) as { id: string; value: string };
    // Used on the others first, so their caches know the key as valid.
    expect((await completion(second, key.value)).status).toBe(200);
    expect((await completion(third, key.value)).status).toBe(200);
    const revoked = await admin(first, "DELETE", `/keys/${key.id}`);
    expect(revoked.status).toBe(200);
    for (const gateway of [second, third, first]) {
      const res = await completion(gateway, key.value);
      expect(res.status).toBe(401);
      expect(await res.text()).toBe(
        "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      );
    }
  });

  it("a balance lowered on one gateway is what the next requests on the others are admitted against", async () => {
    const [first, second, third] = gateways;
    const perRequest = chat("lowered", "per-request");
    // Several each: the gateways now admit the account from leases of its balance.
    for (const gateway of [second, third, second, third, second, third]) {
      expect((await completion(gateway, LOWERED_KEY, perRequest)).status).toBe(200);
    }
    const lowered = await admin(first, "PATCH", "/accounts/lower-me", {
      balance_idr: 2 * PRICE_IDR,
    });
    expect(lowered.status).toBe(200);
    const statuses: number[] = [];
    for (const gateway of [second, third, second, third, first]) {
      statuses.push((await completion(gateway, LOWERED_KEY, perRequest)).status);
    }
    expect(statuses).toEqual([200, 200, 402, 402, 402]);
    expect((await money("lower-me")).balance).toBe(0);
  });

  it("an account suspended on one gateway is refused by the next request on the others, and reinstated the same way", async () => {
    const [first, second, third] = gateways;
    expect((await completion(second, SUSPENDED_KEY)).status).toBe(200);
    expect((await completion(third, SUSPENDED_KEY)).status).toBe(200);
    expect((await admin(first, "POST", "/accounts/suspend-me/suspend")).status).toBe(200);
    for (const gateway of [second, third, first]) {
      const res = await completion(gateway, SUSPENDED_KEY);
      expect(res.status).toBe(401);
      expect(await res.text()).toBe(
        "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
      );
    }
    expect((await admin(third, "POST", "/accounts/suspend-me/reinstate")).status).toBe(200);
    expect((await completion(first, SUSPENDED_KEY)).status).toBe(200);
    expect((await completion(second, SUSPENDED_KEY)).status).toBe(200);
  });

  it("an account's own provider key removed on one gateway is no longer used by the others", async () => {
    const [first, second, third] = gateways;
    const byokRequest = { model: "byok-model", messages: [{ role: "user", content: "mine" }] };
    // The account cannot pay: only its own key admits it.
    const before = await completion(second, POOR_KEY, byokRequest);
    expect(await errorOf(before)).toMatchObject({ status: 402, code: "insufficient_balance" });
    const added = await admin(first, "POST", "/accounts/poor/byok", {
      provider: "byok-prov",
      key: BYOK_KEY,
    });
    expect(added.status).toBe(201);
    const { id } = (await added.json()) as { id: string };
    upstream.reset(() => openaiJson("from upstream"));
    for (const gateway of [second, third]) {
      const res = await completion(gateway, POOR_KEY, byokRequest);
      expect(res.status, await res.clone().text()).toBe(200);
    }
    expect(upstream.requests.map(credentialSeen)).toEqual([BYOK_KEY, BYOK_KEY]);
    const removed = await admin(first, "DELETE", `/accounts/poor/byok/${id}`);
    expect(removed.status).toBe(200);
    for (const gateway of [second, third]) {
      const res = await completion(gateway, POOR_KEY, byokRequest);
      expect(await errorOf(res)).toMatchObject({ status: 402, code: "insufficient_balance" });
    }
    expect(upstream.requests).toHaveLength(2);
  });
});

interface DeviceCode {
  device_code: string;
  user_code: string;
}

describe("login across instances", () => {
  const startLogin = async (gateway: ServeProcess, clientName: string) => {
    const res = await post(gateway, "/api/auth/device/code", { client_name: clientName }, {});
    expect(res.status).toBe(200);
    return (await res.json()) as DeviceCode;
  };
  const pollOn = async (gateway: ServeProcess, code: DeviceCode) => {
    const res = await post(
      gateway,
      "/api/auth/device/token",
      { device_code: code.device_code },
      {},
    );
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  let ownerCookie: string;
  // An owner link works once: the session both tests approve with is opened before either.
  beforeAll(async () => {
    // B's own owner link, printed on its ready line: each gateway's link works after the others started.
    const login = await fetch(gateways[1].ready.owner_url!, { redirect: "manual" });
    expect(login.status, await login.clone().text()).toBe(303);
    ownerCookie = login.headers.get("set-cookie")!.split(";")[0];
  });

  /** The owner approves `code` in the dashboard of `gateway`, with the session opened on B. */
  const approveOn = async (gateway: ServeProcess, code: DeviceCode) => {
    const page = await approvalPage(
      gateway,
      { cookie: ownerCookie, setCookie: "" },
      code.user_code,
    );
    expect(page.status, page.html).toBe(200);
    const approved = await decide(
      gateway,
      "approve",
      { user_code: code.user_code, csrf_token: page.csrf! },
      { cookie: ownerCookie, origin: gateway.url },
    );
    expect(approved.status, approved.html).toBe(200);
    expect(approved.html).toContain("Login approved");
  };

  it("a code started on A, approved on B and polled on C mints exactly one key, which works on A", async () => {
    const [first, second, third] = gateways;
    const code = await startLogin(first, "multi laptop");
    await approveOn(second, code);

    const token = await pollOn(third, code);
    expect(token.status, JSON.stringify(token.body)).toBe(200);
    expect(token.body).toMatchObject({ token_type: "bearer", account_id: "acct" });
    const key = token.body.access_token as string;
    for (const gateway of [first, second]) {
      const again = await pollOn(gateway, code);
      expect(again).toMatchObject({ status: 400, body: { error: "invalid_grant" } });
    }
    const minted = await cluster.sql<{ kind: string; revoked_at: number | null }>(
      "SELECT kind, revoked_at FROM api_keys WHERE label = 'multi laptop'",
    );
    expect(minted).toEqual([{ kind: "login", revoked_at: null }]);

    const whoami = await fetch(`${first.url}/api/auth/whoami`, { headers: bearer(key) });
    expect(await whoami.json()).toMatchObject({ account_id: "acct", kind: "login" });
    expect((await completion(first, key)).status).toBe(200);
  });

  it("polls racing on three gateways hand the approved key out once", async () => {
    const [first, second, third] = gateways;
    const code = await startLogin(third, "racing laptop");
    await approveOn(first, code);
    const polls = await Promise.all(gateways.map((gateway) => pollOn(gateway, code)));
    expect(polls.filter((poll) => poll.status === 200)).toHaveLength(1);
    for (const refused of polls.filter((poll) => poll.status !== 200))
      expect(refused).toMatchObject({ status: 400, body: { error: "invalid_grant" } });
    const key = polls.find((poll) => poll.status === 200)!.body.access_token as string;
    expect((await completion(second, key)).status).toBe(200);
    expect(await cluster.sql("SELECT id FROM api_keys WHERE label = 'racing laptop'")).toHaveLength(
      1,
    );
  });
});

const MUSIC_PRICE_IDR = 100;
const MUSIC_SECONDS = 2;
/** Long enough to outlive its gateway's kill; short enough to run again after the takeover. */
const JOB_SECONDS = 3;
const JOB_LEASE_MS = 1_500;
/** A lease runs on the database's clock, a job's start on the gateway's: one machine's, read apart. */
const clockSlackMs = 50;

describe("jobs across instances", () => {
  let jobs: GatewaysOnPostgres;
  afterAll(async () => {
    await jobs?.stop();
  });

  it("a job whose gateway is SIGKILLed is finished by another once its lease ran out, and charged once", async () => {
    jobs = await gatewaysOnPostgres(
      1,
      baseConfigWith({
        providers: [{ id: "mock-slow", wire: "mock", mock: { job_seconds: JOB_SECONDS } }],
        models: [
          {
            name: "slow-music",
            provider: "mock-slow",
            modality: "music",
            price_per_unit: MUSIC_PRICE_IDR,
          },
        ],
      }),
      { env: { GATEWAY_JOB_LEASE_MS: String(JOB_LEASE_MS) } },
    );
    const [doomed] = jobs.gateways;
    const before = (
      await jobs.sql<{ balance: number }>(
        "SELECT balance_micro AS balance FROM accounts WHERE id = 'acct'",
      )
    )[0].balance;
    const submitted = await post(
      doomed,
      "/v1/music/generations",
      { model: "slow-music", prompt: "survives", duration: MUSIC_SECONDS },
      bearer(KEY),
    );
    expect(submitted.status, await submitted.clone().text()).toBe(202);
    const { id } = (await submitted.json()) as { id: string };
    const jobRow = async () =>
      (
        await jobs.sql<{
          status: string;
          lease_owner: string | null;
          started_at: number;
          lease_expires_at: number;
        }>("SELECT status, lease_owner, started_at, lease_expires_at FROM jobs WHERE id = $1", [id])
      )[0];
    // Only the doomed gateway runs yet: the job is running there when it dies.
    const running = await eventually(jobRow, (row) => row.status === "running", 5_000, "job");
    await killByPid(doomed);
    // Dead mid-job: the row is still running under a lease nobody renews now.
    const orphan = await jobRow();
    expect(orphan).toMatchObject({ status: "running", lease_owner: running.lease_owner });
    const survivor = await jobs.start();

    const taken = await eventually(
      jobRow,
      (row) => row.lease_owner !== null && row.lease_owner !== running.lease_owner,
      JOB_LEASE_MS + 5_000,
      "takeover",
    );
    // Taken over only once the dead gateway's lease had run out.
    expect(taken.started_at).toBeGreaterThanOrEqual(orphan.lease_expires_at - clockSlackMs);
    const poll = async () => {
      const res = await fetch(`${survivor.url}/v1/music/generations/${id}`, {
        headers: bearer(KEY),
      });
      return (await res.json()) as { status: string; result?: { url: string } };
    };
    const done = await eventually(
      poll,
      (job) => job.status === "completed" || job.status === "failed",
      JOB_SECONDS * 1_000 + 5_000,
      "job on the survivor",
    );
    expect(done.status).toBe("completed");
    const content = await fetch(`${survivor.url}/v1/music/generations/${id}/content`, {
      headers: bearer(KEY),
    });
    expect(content.status).toBe(200);

    const charge = micro(MUSIC_SECONDS * MUSIC_PRICE_IDR);
    expect(
      await jobs.sql(
        "SELECT state, cost_micro FROM request_log WHERE endpoint = 'music.generations'",
      ),
    ).toEqual([{ state: "settled", cost_micro: charge }]);
    const after = (
      await jobs.sql<{ balance: number; held: number }>(
        "SELECT balance_micro AS balance, held_micro AS held FROM accounts WHERE id = 'acct'",
      )
    )[0];
    expect(after).toEqual({ balance: before - charge, held: 0 });
    expect(await jobs.sql("SELECT id FROM holds")).toEqual([]);
  });
});
