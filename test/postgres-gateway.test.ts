import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type GatewayOptions, type RunningGateway, startGateway } from "../src/server/gateway.js";
import { startJobRunner } from "../src/server/jobs/runner.js";
import { readPngSize } from "../src/server/media/png.js";
import { readWavInfo } from "../src/server/media/wav.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { admin, errorOf, quota } from "./support/api.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
} from "./support/fake-upstream.js";
import { baseConfigWith, chat, KEY, LOGIN_KEY, POOR_KEY, post } from "./support/gateway.js";
import { createTestDatabase } from "./support/postgres.js";

/**
 * One gateway on Postgres, over real HTTP, giving the answers the SQLite gateway gives: each test
 * here repeats the statuses, codes, headers and amounts of the SQLite test of the same behaviour
 * (named above each), for the suites that do not run on both backends yet. Billing, limits and
 * usage run on both in billing.test.ts and limits.test.ts (`describe.each(backends)`); several
 * processes on one database are multi-instance.test.ts's.
 */

// An account whose requests the request-log tests assert exactly, so the tests share one gateway.
const USAGE_KEY = "kn-test-pg-usage-reader-key-0000";
// The account the config test changes, apart from the ones the other tests spend from.
const CHANGED_KEY = "kn-test-pg-changed-by-config-000";

const MUSIC_PRICE = 100;
const IMAGE_PRICE = 500;
const BYOK_POOL_KEY = "sk-pool-for-byok-9999";

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const micro = (idr: number) => Math.round(idr * 1_000_000);

function mainConfig(upstreamBaseUrl: string): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
      { id: "mock-steady", wire: "mock", mock: { job_seconds: 0.5 } },
      {
        id: "byok-prov",
        wire: "openai",
        base_url: upstreamBaseUrl,
        api_keys: [BYOK_POOL_KEY],
        timeout_ms: 3_000,
      },
    ],
    models: [
      { name: "mock-music", provider: "mock-fast", modality: "music", price_per_unit: MUSIC_PRICE },
      {
        name: "steady-music",
        provider: "mock-steady",
        modality: "music",
        price_per_unit: MUSIC_PRICE,
      },
      {
        name: "byok-model",
        provider: "byok-prov",
        upstream_model: "byok-model-upstream",
        // Whole IDR per token: a charge reads as the fake's usage.
        price_input_per_mtok: 1_000_000,
        price_output_per_mtok: 2_000_000,
        max_output_tokens: 100,
      },
    ],
    accounts: [
      { id: "usage", balance_idr: 1_000_000, keys: [{ id: "usage-key", value: USAGE_KEY }] },
      { id: "changed", balance_idr: 1_000_000, keys: [{ id: "changed-key", value: CHANGED_KEY }] },
    ],
  });
}

let savedSecretKey: string | undefined;
beforeAll(() => {
  savedSecretKey = process.env[secretKeyEnv];
  process.env[secretKeyEnv] = randomBytes(32).toString("base64");
});
afterAll(() => {
  if (savedSecretKey === undefined) delete process.env[secretKeyEnv];
  else process.env[secretKeyEnv] = savedSecretKey;
});

async function postgresGateway(options: GatewayOptions & { db: string }): Promise<RunningGateway> {
  return startGateway({ keepaliveMs: 1_000, ...options, port: 0 });
}

describe("a gateway on Postgres", () => {
  let db: string;
  let gw: RunningGateway;
  let upstream: FakeUpstream;

  beforeAll(async () => {
    upstream = await fakeUpstream("openai");
    db = await createTestDatabase();
    gw = await postgresGateway({ db, config: mainConfig(upstream.baseUrl) });
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });

  /** The balance minus what requests and jobs in flight hold, in micro-IDR. */
  const spendable = async (key = KEY) => {
    const shown = await quota(gw, key);
    return micro(shown.balance_idr) - micro(shown.held_idr);
  };

  describe("requests the client leaves (core.test.ts)", () => {
    it("settles a stream the client abandons midway, and logs a client that left before the answer as client_closed, charging nothing", async () => {
      const abandoned = new AbortController();
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(KEY), "content-type": "application/json" },
        body: JSON.stringify(
          chat("walk away [[mock:words=400]] [[mock:delay=100]]", "mock-gpt", { stream: true }),
        ),
        signal: abandoned.signal,
      });
      await res.body!.getReader().read();
      abandoned.abort();
      const streamed = async () =>
        (await gw.listRequests({ limit: 1 })).find((row) => row.stream && row.account === "acct");
      await expect
        .poll(async () => (await streamed())?.state, { timeout: 5_000 })
        .not.toBe("reserved");
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);

      const before = await quota(gw);
      const left = new AbortController();
      const pending = fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(KEY), "content-type": "application/json" },
        body: JSON.stringify(chat("leaving early [[mock:delay=400]]")),
        signal: left.signal,
      }).catch(() => "aborted");
      await new Promise((resolve) => setTimeout(resolve, 100));
      left.abort();
      expect(await pending).toBe("aborted");
      const closed = async () => {
        const [last] = await gw.listRequests({ limit: 1 });
        return { state: last.state, error_code: last.error_code, cost_micro: last.cost_micro };
      };
      await expect
        .poll(closed, { timeout: 5_000 })
        .toEqual({ state: "failed", error_code: "client_closed", cost_micro: 0 });
      expect((await quota(gw)).balance_idr).toBe(before.balance_idr);
    });
  });

  describe("the request log (inspect.test.ts)", () => {
    it("answers a request that failed only once its failure is in the request log", async () => {
      const auth = bearer(USAGE_KEY);
      // Admitted from this gateway's lease from now on: the failure below needs no hold.
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(200);
      // Another transaction holds the account's row: the failure's settlement waits on it.
      const blocker = new pg.Client({ connectionString: db });
      await blocker.connect();
      const logged = async () =>
        (
          await blocker.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM request_log WHERE account_id = 'usage' AND state = 'failed'",
          )
        ).rows[0].n;
      try {
        const failedBefore = await logged();
        await blocker.query("BEGIN");
        await blocker.query("SELECT 1 FROM accounts WHERE id = 'usage' FOR UPDATE");
        const answer = post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]"), auth);
        const early = await Promise.race([
          answer.then(() => "answered"),
          new Promise((resolve) => setTimeout(() => resolve("waiting"), 500)),
        ]);
        expect(early).toBe("waiting");
        await blocker.query("COMMIT");
        expect((await answer).status).toBe(503);
        expect(await logged()).toBe(failedBefore + 1);
      } finally {
        await blocker.end();
      }
    });

    it("lists requests with listRequests(), as on SQLite", async () => {
      const auth = bearer(USAGE_KEY);
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]"), auth)).status).toBe(
        503,
      );
      const listed = await gw.listRequests({ limit: 2 });
      expect(listed).toHaveLength(2);
      // The answer went out before its settlement was written: wait for that, not for time.
      await expect
        .poll(async () =>
          (await gw.listRequests({ limit: 2 })).map(
            ({ account, status, error_code, state, key }) => ({
              account,
              status,
              error_code,
              state,
              key,
            }),
          ),
        )
        .toEqual([
          {
            account: "usage",
            status: 503,
            error_code: "upstream_error",
            state: "failed",
            key: { id: "usage-key", label: "usage-key" },
          },
          {
            account: "usage",
            status: 200,
            error_code: null,
            state: "settled",
            key: { id: "usage-key", label: "usage-key" },
          },
        ]);
      expect((await gw.listRequests({ status: 503, limit: 1 }))[0].id).toBe(listed[0].id);
    });
  });

  describe("BYOK (byok-keypool.test.ts)", () => {
    const link = async (account: string, key: string) => {
      const res = await admin(gw, "POST", `/accounts/${account}/byok`, {
        provider: "byok-prov",
        key,
      });
      const text = await res.text();
      expect(res.status).toBe(201);
      expect(text).not.toContain(key);
      return JSON.parse(text) as { id: string; key_hint: string };
    };
    const ask = (key: string) =>
      post(
        gw,
        "/v1/chat/completions",
        { model: "byok-model", max_tokens: 20, messages: [{ role: "user", content: "hi" }] },
        bearer(key),
      );

    it("uses a linked key free of token prices, and the pool, charged, when it fails", async () => {
      const own = "sk-user-byok-one-1111";
      expect((await link("acct", own)).key_hint).toBe("...1111");
      upstream.reset();
      const before = await spendable();
      expect((await ask(KEY)).status).toBe(200);
      expect(upstream.requests.map(credentialSeen)).toEqual([own]);
      expect(await spendable()).toBe(before);

      upstream.reset((req) =>
        credentialSeen(req) === own
          ? openaiError(401, "Incorrect API key provided", "invalid_api_key")
          : openaiJson("ok"),
      );
      expect((await ask(KEY)).status).toBe(200);
      expect(upstream.requests.map(credentialSeen)).toEqual([own, BYOK_POOL_KEY]);
      expect(await spendable()).toBe(before - micro(25));
    });

    it("admits an account that cannot pay when it has its own key, using only that key", async () => {
      upstream.reset();
      expect(await errorOf(await ask(POOR_KEY))).toMatchObject({
        status: 402,
        code: "insufficient_balance",
      });
      expect(upstream.requests).toHaveLength(0);

      const poorKey = "sk-poor-own-key-7777";
      await link("poor", poorKey);
      const res = await ask(POOR_KEY);
      expect(res.status).toBe(200);
      expect(
        ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0].message
          .content,
      ).toBe("ok");
      expect(upstream.requests.map(credentialSeen)).toEqual([poorKey]);
      expect((await quota(gw, POOR_KEY)).balance_idr).toBe(0);

      // Its own key failing never falls through to the pool it cannot pay for.
      upstream.reset(() => openaiError(500, "down", null, "server_error"));
      expect((await ask(POOR_KEY)).status).toBe(503);
      expect(upstream.requests.map(credentialSeen)).toEqual([poorKey]);
    });
  });

  describe("per-tool keys (tool-keys.test.ts)", () => {
    interface Created {
      id: string;
      key: string;
      label: string;
      kind: string;
      created_at: number;
    }
    const api = (method: string, path: string, key: string, body?: unknown) =>
      fetch(`${gw.url}${path}`, {
        method,
        headers: {
          ...bearer(key),
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const create = async (label: string): Promise<Created> => {
      const res = await api("POST", "/api/keys", LOGIN_KEY, { label });
      expect(res.status).toBe(201);
      expect(res.headers.get("cache-control")).toBe("no-store");
      return (await res.json()) as Created;
    };

    it("mints keys with the login key, lists them without values, and a revoked one gets 401 at once", async () => {
      const first = await create("tool-a");
      const second = await create("tool-b");
      expect(first).toMatchObject({ label: "tool-a", kind: "standard" });
      expect(first.key).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
      for (const tool of [first, second])
        expect((await post(gw, "/v1/chat/completions", chat(), bearer(tool.key))).status).toBe(200);

      const list = (await (await api("GET", "/api/keys", LOGIN_KEY)).json()) as {
        data: Record<string, unknown>[];
      };
      expect(list.data.map((listed) => listed.id)).toEqual([first.id, second.id]);
      const text = JSON.stringify(list);
      expect(text).not.toContain(first.key);
      expect(text).not.toMatch(/hash/);
      expect(list.data[0]).toMatchObject({ prefix: first.key.slice(0, 7), revoked_at: null });
      expect(list.data[0].last_used_at).not.toBeNull();

      const revoked = await api("DELETE", `/api/keys/${first.id}`, LOGIN_KEY);
      expect(revoked.status).toBe(200);
      expect(await revoked.json()).toMatchObject({
        id: first.id,
        revoked: true,
        already_revoked: false,
      });
      const refused = await post(gw, "/v1/chat/completions", chat(), bearer(first.key));
      expect(refused.status).toBe(401);
      expect(await refused.text()).toBe(
        "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      );
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(second.key))).status).toBe(200);
      expect((await api("POST", "/api/keys", KEY, { label: "nope" })).status).toBe(403);
    });
  });

  describe("media (images.test.ts, jobs.test.ts)", () => {
    it("returns n pictures and charges n x price_per_unit; a URL result downloads for its own account", async () => {
      const before = await spendable();
      const res = await post(gw, "/v1/images/generations", {
        model: "mock-image",
        prompt: "a lighthouse at dusk",
        n: 3,
        size: "256x256",
        response_format: "b64_json",
      });
      expect(res.status).toBe(200);
      const { data } = (await res.json()) as { data: { b64_json: string }[] };
      expect(data).toHaveLength(3);
      for (const picture of data)
        expect(readPngSize(Buffer.from(picture.b64_json, "base64"))).toEqual({
          width: 256,
          height: 256,
        });
      expect(before - (await spendable())).toBe(3 * IMAGE_PRICE * 1_000_000);

      const linked = (await (
        await post(gw, "/v1/images/generations", {
          model: "mock-image",
          prompt: "a red kite",
          size: "512x256",
          response_format: "url",
        })
      ).json()) as { data: { url: string }[] };
      const url = linked.data[0].url;
      expect(url).toMatch(new RegExp(`^${gw.url}/v1/files/file_`));
      const own = await fetch(url, { headers: bearer(KEY) });
      expect(own.status).toBe(200);
      expect(own.headers.get("content-type")).toBe("image/png");
      expect(readPngSize(new Uint8Array(await own.arrayBuffer()))).toEqual({
        width: 512,
        height: 256,
      });
      expect((await fetch(url, { headers: bearer(POOR_KEY) })).status).toBe(404);
      expect(before - (await spendable())).toBe(4 * IMAGE_PRICE * 1_000_000);
    });

    interface Job {
      id: string;
      object: string;
      status: string;
      result?: { url: string; content_type: string; bytes: number };
      error?: { code: string; message: string };
    }
    const submitMusic = async (
      prompt: string,
      duration: number,
      model = "mock-music",
    ): Promise<Job> => {
      const res = await post(gw, "/v1/music/generations", {
        model,
        prompt,
        duration,
      });
      expect(res.status).toBe(202);
      return (await res.json()) as Job;
    };
    /** Polls until the job ends; bounded so a stuck runner fails the test instead of hanging it. */
    const finishedJob = async (id: string): Promise<Job> => {
      const deadline = Date.now() + 5_000;
      for (;;) {
        const res = await fetch(`${gw.url}/v1/music/generations/${id}`, { headers: bearer(KEY) });
        expect(res.status).toBe(200);
        const job = (await res.json()) as Job;
        if (job.status === "completed" || job.status === "failed") return job;
        if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const musicLog = async () =>
      (await gw.listRequests({ limit: 1000 }))
        .filter((row) => row.endpoint === "music.generations")
        .reverse()
        .map(({ state, cost_micro }) => ({ state, cost_micro }));

    it("runs a music job: queued at once, completed, downloadable, charged once", async () => {
      const before = await spendable();
      const logBefore = await musicLog();
      const job = await submitMusic("lofi rain", 3);
      expect(job).toMatchObject({ object: "music.generation", status: "queued" });
      expect(job.id).toMatch(/^music_/);
      // The worst case is held while the job runs, and charged when it ends.
      expect(before - (await spendable())).toBe(3 * MUSIC_PRICE * 1_000_000);

      const done = await finishedJob(job.id);
      expect(done.status).toBe("completed");
      expect(done.result).toMatchObject({ content_type: "audio/wav", duration: 3 });
      expect(done.result!.url).toBe(`${gw.url}/v1/music/generations/${job.id}/content`);
      const file = await fetch(done.result!.url, { headers: bearer(KEY) });
      expect(file.status).toBe(200);
      expect(file.headers.get("content-type")).toBe("audio/wav");
      const bytes = Buffer.from(await file.arrayBuffer());
      expect(bytes.length).toBe(done.result!.bytes);
      expect(readWavInfo(bytes)?.durationSeconds).toBe(3);
      expect(before - (await spendable())).toBe(3 * MUSIC_PRICE * 1_000_000);
      expect(await musicLog()).toEqual([
        ...logBefore,
        { state: "settled", cost_micro: 3 * MUSIC_PRICE * 1_000_000 },
      ]);
      const other = await fetch(done.result!.url, { headers: bearer(POOR_KEY) });
      expect(other.status).toBe(404);
    });

    it("fails a job whose provider fails, with an error, and refunds its hold", async () => {
      const before = await spendable();
      // A job that takes a while: its hold is still there when the quota is read.
      const job = await submitMusic("[[mock:fail=500]]", 2, "steady-music");
      expect(before - (await spendable())).toBe(2 * MUSIC_PRICE * 1_000_000);
      const done = await finishedJob(job.id);
      expect(done.status).toBe("failed");
      expect(done.error).toEqual({
        code: "upstream_error",
        message: "The provider failed or timed out: send the request again in a few seconds.",
      });
      expect(done.result).toBeUndefined();
      expect(await spendable()).toBe(before);
      expect((await musicLog()).at(-1)).toEqual({ state: "failed", cost_micro: 0 });
    });

    it("answers a submission queued even when another gateway's runner claims it at once", async () => {
      // A second runner on the database that looks at the queue every millisecond: it claims a
      // job as soon as its insert commits, before this gateway could read the row back.
      const eager = await startJobRunner(gw.services, { pollMs: 1 });
      try {
        for (let i = 0; i < 20; i++) {
          const job = (await submitMusic(`eager ${i}`, 1)) as Job & { started_at: unknown };
          expect(job).toMatchObject({ status: "queued", started_at: null });
          expect((await finishedJob(job.id)).status).toBe("completed");
        }
      } finally {
        await eager.stop();
      }
    });
  });

  describe("the owner dashboard (device-flow.test.ts, dashboard-account.test.ts)", () => {
    it("follows the owner URL to a session whose dashboard shows the account and its usage", async () => {
      // A request of its own for the page's usage and recent table, whichever test ran before.
      expect(
        (await post(gw, "/v1/images/generations", { model: "mock-image", prompt: "a" })).status,
      ).toBe(200);
      expect(gw.ownerUrl).toMatch(
        new RegExp(`^${gw.url}/dashboard/login\\?token=[A-Za-z0-9_-]{43}$`),
      );
      const first = await fetch(gw.ownerUrl!, { redirect: "manual" });
      expect(first.status).toBe(303);
      expect(first.headers.get("location")).toBe("/dashboard");
      const cookie = first.headers.get("set-cookie")!;
      expect(cookie).toMatch(/HttpOnly/);
      const session = { cookie: cookie.split(";")[0] };
      const page = await fetch(`${gw.url}/dashboard`, { headers: session });
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toContain("Dashboard of account acct");
      const summary = (await (
        await fetch(`${gw.url}/v1/usage/summary`, { headers: bearer(KEY) })
      ).json()) as { requests: number };
      expect(summary.requests).toBeGreaterThan(0);
      expect(html).toContain(
        `<p id="usage-total"><strong>${summary.requests.toLocaleString("en-US")}</strong> requests`,
      );
      expect(html).toMatch(/<table id="recent">[\s\S]*<code>mock-image<\/code>/);

      const csrf = /name="csrf-token" content="([^"]+)"/.exec(html)![1];
      const viaApi = (await (
        await fetch(`${gw.url}/api/dashboard/usage/summary`, {
          headers: { ...session, "x-csrf-token": csrf },
        })
      ).json()) as { account_id: string; requests: number };
      expect(viaApi).toMatchObject({ account_id: "acct", requests: summary.requests });

      // The owner's account view shows the balance as charged, right after an answer.
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      const account = (await (
        await fetch(`${gw.url}/api/dashboard/account`, { headers: session })
      ).json()) as { id: string; balance_idr: number };
      expect(account.id).toBe("acct");
      expect(account.balance_idr).toBe((await quota(gw)).balance_idr);

      // A key made under the session shows on the page, never whole; the page's form revokes it.
      const created = await fetch(`${gw.url}/api/dashboard/keys`, {
        method: "POST",
        headers: { ...session, "x-csrf-token": csrf, "content-type": "application/json" },
        body: JSON.stringify({ label: "to-revoke" }),
      });
      expect(created.status).toBe(201);
      const made = (await created.json()) as { id: string; key: string };
      const listing = await (await fetch(`${gw.url}/dashboard`, { headers: session })).text();
      expect(listing).toContain(made.id);
      expect(listing).toContain("to-revoke");
      expect(listing).not.toContain(made.key);
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(made.key))).status).toBe(200);
      const form = await fetch(`${gw.url}/dashboard/keys/${made.id}/revoke`, {
        method: "POST",
        headers: {
          ...session,
          "content-type": "application/x-www-form-urlencoded",
          origin: gw.url,
        },
        body: new URLSearchParams({ csrf_token: csrf }).toString(),
        redirect: "manual",
      });
      expect(form.status).toBe(303);
      const refused = await post(gw, "/v1/chat/completions", chat(), bearer(made.key));
      expect(refused.status).toBe(401);
      expect(await refused.text()).toBe(
        "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      );

      const again = await fetch(gw.ownerUrl!, { redirect: "manual" });
      expect(again.status).toBe(401);
      expect(await again.text()).toContain("already used");
    });
  });

  describe("config", () => {
    it("reaches a running gateway when another gateway applies a changed config (config.test.ts)", async () => {
      const models = async () =>
        (
          (await (await fetch(`${gw.url}/v1/models`)).json()) as { data: { id: string }[] }
        ).data.map((model) => model.id);
      expect(await models()).not.toContain("late-model");
      const before = await quota(gw);
      const changed = mainConfig(upstream.baseUrl);
      changed.models = [
        ...changed.models!,
        { name: "late-model", provider: "mock", price_input_per_mtok: 10_000 },
      ];
      changed.accounts = changed.accounts!.map((account) =>
        account.id === "changed" ? { ...account, balance_idr: 7 } : account,
      );
      const second = await postgresGateway({ db, config: changed });
      try {
        await expect.poll(models, { timeout: 2_000, interval: 20 }).toContain("late-model");
        await expect
          .poll(async () => (await quota(gw, CHANGED_KEY)).balance_idr, { timeout: 2_000 })
          .toBe(7);
        // An unchanged account keeps what it spent; a changed one takes the config's values.
        for (const running of [gw, second])
          expect((await quota(running)).balance_idr).toBe(before.balance_idr);
        const res = await post(gw, "/v1/chat/completions", chat("x", "late-model"));
        expect(res.status).toBe(200);
        const { usage } = (await res.json()) as { usage: { prompt_tokens: number } };
        const charged = micro(before.balance_idr) - usage.prompt_tokens * 10_000;
        for (const running of [gw, second])
          expect(micro((await quota(running)).balance_idr)).toBe(charged);
      } finally {
        await second.close();
      }
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    });
  });
});
