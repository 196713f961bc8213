import OpenAI from "openai";
import { CursorPage } from "openai/pagination";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { ownerSession } from "./support/cli.js";
import {
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  post,
  SHARED_KEY,
  type TestGateway,
} from "./support/gateway.js";

/**
 * A client reading its whole request log from `/v1/usage/requests`, more than one answer's worth
 * of it, page by page as OpenAI's lists page: every request it made is on exactly one page, in one
 * order whatever the page size, hundreds of them admitted in the same millisecond; another
 * account's requests are neither listed nor reachable through the cursor. On both backends.
 */

const OTHER_KEY = "kn-test-other-account-key-000000";
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

// biome-ignore lint/suspicious/noExplicitAny: JSON read back from the gateway
type Json = any;

function config(): ConfigInput {
  return baseConfigWith({
    accounts: [
      {
        id: "other",
        balance_idr: 1_000_000,
        rpm_limit: 1000,
        keys: [{ id: "ko", label: "other", kind: "standard", value: OTHER_KEY }],
      },
    ],
  });
}

describe.each(backends)("paging GET /v1/usage/requests, on %s", (backend) => {
  let gw: TestGateway;
  /** The `x-request-id` of every request each account made, as its client was answered. */
  const made = { acct: [] as string[], other: [] as string[] };

  /** One request; its id from the answer's header. */
  const ask = async (key: string): Promise<string> => {
    const res = await post(gw, "/v1/chat/completions", chat("count me"), bearer(key));
    expect(res.status).toBe(200);
    await res.text();
    return res.headers.get("x-request-id")!;
  };

  /** Requests ten at a time, so hundreds are admitted while the manual clock stands still. */
  const askMany = async (key: string, count: number, into: string[]) => {
    for (let i = 0; i < count; i += 10) {
      into.push(
        ...(await Promise.all(Array.from({ length: Math.min(10, count - i) }, () => ask(key)))),
      );
    }
  };

  /** A usage read; the clock moves a second first, so no walk meets the 60 reads a minute. */
  const read = async (path: string, headers: Record<string, string> = bearer(KEY)) => {
    gw.clock.advance(1_001);
    return fetch(`${gw.url}${path}`, { headers });
  };

  /** Every page from the first, following `last_id` while `has_more`: the rows, and the pages. */
  const walk = async (
    query: Record<string, string>,
    headers: Record<string, string> = bearer(KEY),
    path = "/v1/usage/requests",
    between?: (page: number) => Promise<void>,
  ): Promise<{ rows: Json[]; pages: number }> => {
    const rows: Json[] = [];
    let after: string | undefined;
    // The longest walk here is 76 pages: a cursor that repeats a page ends it as a failure.
    for (let pages = 1; pages <= 150; pages++) {
      const search = new URLSearchParams(after ? { ...query, after } : query);
      const res = await read(`${path}?${search}`, headers);
      expect(res.status, `page ${pages}`).toBe(200);
      const page = (await res.json()) as Json;
      expect(page.object).toBe("list");
      expect(page.first_id).toBe(page.data[0]?.id ?? null);
      expect(page.last_id).toBe(page.data.at(-1)?.id ?? null);
      rows.push(...page.data);
      if (!page.has_more) return { rows, pages };
      expect(page.data).toHaveLength(Number(query.limit ?? 50));
      after = page.last_id;
      await between?.(pages);
    }
    throw new Error("the walk never ended");
  };
  const ids = (rows: Json[]) => rows.map((row) => row.id as string);

  beforeAll(async () => {
    gw = await gatewayOn(backend, {
      config: config(),
      clock: "manual",
      now: () => Date.parse("2030-01-01T00:00:00Z"),
    });
    // 300 in one millisecond (more than a page holds), then 230 a millisecond apart ten by ten;
    // the other account's requests interleaved.
    await askMany(KEY, 300, made.acct);
    await askMany(OTHER_KEY, 10, made.other);
    for (let batch = 0; batch < 23; batch++) {
      gw.clock.advance(1);
      await askMany(KEY, 10, made.acct);
      made.other.push(await ask(OTHER_KEY));
    }
    await gw.services.ledger.committed();
  }, 120_000);
  afterAll(async () => {
    await gw?.close();
  });

  it("lists every request on exactly one page, newest first, the same order at every page size", async () => {
    const small = await walk({ limit: "7" });
    expect(small.pages).toBe(Math.ceil(530 / 7));
    expect(small.rows).toHaveLength(530);
    expect(new Set(ids(small.rows)).size).toBe(530);
    expect([...ids(small.rows)].sort()).toEqual([...made.acct].sort());
    // Newest first by admission; hundreds share a millisecond, so the tie's order is the rows'.
    const times = small.rows.map((row) => Date.parse(row.created_at));
    for (let i = 1; i < times.length; i++) expect(times[i]).toBeLessThanOrEqual(times[i - 1]);
    expect(times.filter((t) => t === times.at(-1)).length).toBe(300);

    const whole = await walk({ limit: "500" });
    expect(whole.pages).toBe(2);
    expect(ids(whole.rows)).toEqual(ids(small.rows));
    const odd = await walk({ limit: "9", order: "desc" });
    expect(ids(odd.rows)).toEqual(ids(small.rows));

    const oldestFirst = await walk({ limit: "13", order: "asc" });
    expect(ids(oldestFirst.rows)).toEqual(ids(small.rows).reverse());
  });

  it("starts a page after any request of the account, not only after a page's last", async () => {
    const newestFirst = ids((await walk({ limit: "500" })).rows);
    for (const [order, list] of [
      ["desc", newestFirst],
      ["asc", [...newestFirst].reverse()],
    ] as const) {
      // One among requests a millisecond apart, one among the 300 of one millisecond.
      for (const at of [123, 400]) {
        const res = await read(`/v1/usage/requests?limit=40&order=${order}&after=${list[at]}`);
        expect(res.status).toBe(200);
        const page = (await res.json()) as Json;
        expect({ order, at, listed: ids(page.data), more: page.has_more }).toEqual({
          order,
          at,
          listed: list.slice(at + 1, at + 41),
          more: true,
        });
      }
    }
    const res = await read(`/v1/usage/requests?after=${newestFirst.at(-1)}`);
    expect(await res.json()).toEqual({
      object: "list",
      data: [],
      first_id: null,
      last_id: null,
      has_more: false,
    });
  });

  it("answers the first 50 without a query, as before, now with has_more and the page's ids", async () => {
    const first = (await (await read("/v1/usage/requests")).json()) as Json;
    const newest = await walk({ limit: "500" });
    expect(first.data).toEqual(newest.rows.slice(0, 50));
    expect(first).toMatchObject({
      object: "list",
      has_more: true,
      first_id: newest.rows[0].id,
      last_id: newest.rows[49].id,
    });
  });

  it("walks with the OpenAI SDK's cursor page, which follows the last id while has_more", async () => {
    const openai = new OpenAI({
      apiKey: KEY,
      baseURL: `${gw.url}/v1`,
      maxRetries: 0,
      fetch: (url, init) => {
        gw.clock.advance(1_001);
        return fetch(url, init);
      },
    });
    const listed: string[] = [];
    type Listed = { id: string };
    const pages = openai.getAPIList<Listed, CursorPage<Listed>>("/usage/requests", CursorPage, {
      query: { limit: 100 },
    });
    for await (const request of pages) {
      listed.push(request.id);
      if (listed.length > 1_000) throw new Error("the SDK's walk never ended");
    }
    expect(listed).toEqual(ids((await walk({ limit: "500" })).rows));
  });

  it("pages the dashboard's JSON of the owner's requests the same way", async () => {
    const owner = await ownerSession(gw);
    const dashboard = await walk(
      { limit: "200" },
      { cookie: owner.cookie },
      "/api/dashboard/usage/requests",
    );
    expect(dashboard.pages).toBe(3);
    expect(ids(dashboard.rows)).toEqual(ids((await walk({ limit: "500" })).rows));
  });

  it("refuses a limit, order or cursor it cannot serve with a 400 naming the parameter", async () => {
    for (const [query, parameter] of [
      ["limit=0", "limit"],
      ["limit=501", "limit"],
      ["limit=ten", "limit"],
      ["limit=2.5", "limit"],
      ["limit=", "limit"],
      ["order=sideways", "order"],
      ["after=", "after"],
      ["after=req_neverWasAnyRequest", "after"],
    ]) {
      const res = await read(`/v1/usage/requests?${query}`);
      expect(res.status, query).toBe(400);
      const body = (await res.json()) as Json;
      expect(body.error.code, query).toBe("bad_request");
      expect(body.error.message, query).toMatch(new RegExp(`\\b${parameter}\\b`));
    }
  });

  it("keeps each account to its own requests: another's id is an unknown cursor, and says nothing more", async () => {
    const theirs = await walk({ limit: "500" }, bearer(OTHER_KEY));
    expect([...ids(theirs.rows)].sort()).toEqual([...made.other].sort());

    const refusal = async (key: string, after: string) => {
      const res = await read(`/v1/usage/requests?after=${after}`, bearer(key));
      expect(res.status).toBe(400);
      return ((await res.json()) as Json).error.message.replace(after, "<id>") as string;
    };
    const madeUp = "req_AAAAAAAAAAAAAAAA";
    for (const [key, foreign] of [
      [OTHER_KEY, made.acct[0]],
      [OTHER_KEY, made.acct.at(-1)!],
      [KEY, made.other[3]],
    ] as const) {
      // The same answer as for an id that never was: nothing tells the other account's apart.
      expect(await refusal(key, foreign)).toBe(await refusal(key, madeUp));
      expect(await refusal(key, foreign)).toContain("after");
    }
    // A page of acct's walk that ended on an id is remembered as a cursor; still only for acct.
    const page = (await (await read("/v1/usage/requests?limit=3")).json()) as Json;
    expect(page.has_more).toBe(true);
    expect((await read(`/v1/usage/requests?after=${page.last_id}`, bearer(KEY))).status).toBe(200);
    expect(await refusal(OTHER_KEY, page.last_id)).toBe(await refusal(OTHER_KEY, madeUp));
    // A shared key reads no usage report, paged or not.
    expect(
      (await read(`/v1/usage/requests?after=${page.last_id}`, bearer(SHARED_KEY))).status,
    ).toBe(403);
  });

  it("lists each request once when new ones arrive mid-walk: newest first they are before the walk, oldest first after it", async () => {
    const other = bearer(OTHER_KEY);
    /** A walk of 5 a page during which `count` new requests are made, after its second page. */
    const walkWhileAsking = async (order: string, count: number) => {
      const arrived: string[] = [];
      const { rows } = await walk({ limit: "5", order }, other, undefined, async (page) => {
        if (page !== 2) return;
        gw.clock.advance(1);
        await askMany(OTHER_KEY, count, arrived);
        await gw.services.ledger.committed();
      });
      return { listed: ids(rows), arrived };
    };

    const before = ids((await walk({ limit: "500" }, other)).rows);
    const newestFirst = await walkWhileAsking("desc", 3);
    expect(newestFirst.listed).toEqual(before);

    const oldestFirst = await walkWhileAsking("asc", 2);
    const sorted = (list: string[]) => [...list].sort();
    expect(oldestFirst.listed).toHaveLength(before.length + 5);
    expect(new Set(oldestFirst.listed).size).toBe(before.length + 5);
    expect(oldestFirst.listed.slice(0, before.length)).toEqual([...before].reverse());
    expect(sorted(oldestFirst.listed.slice(before.length, -2))).toEqual(
      sorted(newestFirst.arrived),
    );
    expect(sorted(oldestFirst.listed.slice(-2))).toEqual(sorted(oldestFirst.arrived));
  });

  it("describes limit, order and after in /openapi.json", async () => {
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as Json;
    for (const path of ["/v1/usage/requests", "/api/dashboard/usage/requests"]) {
      const parameters = doc.paths[path].get.parameters as Json[];
      expect(parameters.map((p) => [p.name, p.in, p.required])).toEqual([
        ["limit", "query", false],
        ["order", "query", false],
        ["after", "query", false],
      ]);
      expect(parameters[0].schema).toMatchObject({ type: "integer", minimum: 1, maximum: 500 });
      expect(parameters[1].schema.enum).toEqual(["asc", "desc"]);
    }
  });
});
