import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  chat,
  KEY,
  LOGIN_KEY,
  post,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/** Per-tool keys minted from a login key, over real HTTP. */

let gw: TestGateway;

beforeAll(async () => {
  gw = await testGateway();
});
afterAll(() => gw?.close());

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function api(method: string, path: string, key: string | undefined, body?: unknown) {
  return fetch(`${gw.url}${path}`, {
    method,
    headers: {
      ...(key ? bearer(key) : {}),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

let accounts = 0;

/** A login key of a fresh account, so counters and listings start empty. */
function newLoginKey(label = "another login"): string {
  const accountId = `tools-${++accounts}`;
  gw.services.store.createAccount({
    id: accountId,
    name: accountId,
    balanceMicro: 1_000_000_000_000,
    rpmLimit: 1000,
    tier: "free",
    now: Date.now(),
  });
  return loginKeyOf(accountId, label);
}

/** Another login key of `accountId`: a second machine, or a login that replaced one. */
function loginKeyOf(accountId: string, label = "another login"): string {
  return gw.services.store.createKey({ accountId, label, kind: "login" }).value;
}

interface Created {
  id: string;
  key: string;
  label: string;
  kind: string;
  created_at: number;
}

async function create(login: string, label: string, shared?: boolean): Promise<Created> {
  const res = await api("POST", "/api/keys", login, { label, shared });
  expect(res.status).toBe(201);
  return (await res.json()) as Created;
}

describe("POST /api/keys", () => {
  it("mints a per-tool key once (201) that works on /v1 at once", async () => {
    const res = await api("POST", "/api/keys", LOGIN_KEY, { label: "ci" });
    expect(res.status).toBe(201);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const body = (await res.json()) as Created;
    expect(Object.keys(body).sort()).toEqual([
      "created_at",
      "id",
      "key",
      "kind",
      "label",
      "parent_key_id",
    ]);
    expect(body).toMatchObject({ label: "ci", kind: "standard", parent_key_id: "kl" });
    expect(body.key).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
    expect(gw.services.store.getKey(body.id)).toMatchObject({
      parent_key_id: "kl",
      account_id: "acct",
    });
    expect((await post(gw, "/v1/chat/completions", chat(), bearer(body.key))).status).toBe(200);
  });

  it("mints a shared key when asked", async () => {
    expect((await create(LOGIN_KEY, "for-the-team", true)).kind).toBe("shared");
  });

  it("answers 403 forbidden (chat-style JSON) for any key that is not a login key", async () => {
    for (const key of [KEY, SHARED_KEY]) {
      const res = await api("POST", "/api/keys", key, { label: "nope" });
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({
        error: {
          message: expect.stringContaining("login key"),
          type: "forbidden",
          param: null,
          code: "forbidden",
        },
      });
    }
    expect((await api("GET", "/api/keys", KEY)).status).toBe(403);
    expect((await api("DELETE", "/api/keys/k2", KEY)).status).toBe(403);
  });

  it("answers 401 in plain text without a key or with a wrong one", async () => {
    for (const key of [undefined, "kn-wrong-wrong-wrong-wrong-wrong-00"]) {
      const res = await api("POST", "/api/keys", key, { label: "x" });
      expect(res.status).toBe(401);
      expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    }
  });

  it("answers 400 bad_request for a missing or empty label", async () => {
    for (const body of [{}, { label: "  " }, { label: 5 }]) {
      const res = await api("POST", "/api/keys", LOGIN_KEY, body);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: { code: "bad_request" } });
    }
  });
});

describe("GET /api/keys and DELETE /api/keys/:id", () => {
  it("lists the account's per-tool keys, never a value or hash", async () => {
    const login = newLoginKey();
    const a = await create(login, "tool-a");
    const b = await create(login, "tool-b");
    const res = await api("GET", "/api/keys", login);
    const list = (await res.json()) as { data: Record<string, unknown>[] };
    expect(list.data.map((k) => k.id)).toEqual([a.id, b.id]);
    expect(Object.keys(list.data[0]).sort()).toEqual(
      [
        "created_at",
        "id",
        "kind",
        "label",
        "last_used_at",
        "parent_key_id",
        "prefix",
        "revoked_at",
      ].sort(),
    );
    const text = JSON.stringify(list);
    expect(text).not.toContain(a.key);
    expect(text).not.toContain(b.key);
    expect(text).not.toMatch(/hash/);
    expect(list.data[0]).toMatchObject({
      prefix: a.key.slice(0, 7),
      last_used_at: null,
      revoked_at: null,
    });
  });

  it("revokes by id and by label; the very next request with the key gets 401", async () => {
    const login = newLoginKey();
    const byId = await create(login, "by-id");
    const byLabel = await create(login, "by-label");
    for (const key of [byId, byLabel]) {
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(key.key))).status).toBe(200);
    }
    const first = await api("DELETE", `/api/keys/${byId.id}`, login);
    expect(first.status).toBe(200);
    expect(await first.json()).toMatchObject({
      id: byId.id,
      revoked: true,
      already_revoked: false,
    });
    const second = await api("DELETE", "/api/keys/by-label", login);
    expect(await second.json()).toMatchObject({
      id: byLabel.id,
      revoked: true,
      already_revoked: false,
    });
    for (const key of [byId, byLabel]) {
      const res = await post(gw, "/v1/chat/completions", chat(), bearer(key.key));
      expect(res.status).toBe(401);
      expect(await res.text()).toBe(
        "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      );
    }
    const list = (await (await api("GET", "/api/keys", login)).json()) as {
      data: { revoked_at: number | null }[];
    };
    expect(list.data.every((k) => k.revoked_at !== null)).toBe(true);
  });

  it("says a key was already revoked, by id or label, and lists the ids of an ambiguous label", async () => {
    const login = newLoginKey();
    const once = await create(login, "twice");
    const first = (await (await api("DELETE", `/api/keys/${once.id}`, login)).json()) as {
      revoked_at: number;
    };
    for (const target of [once.id, "twice"]) {
      const again = await api("DELETE", `/api/keys/${target}`, login);
      expect(again.status).toBe(200);
      expect(await again.json()).toEqual({
        id: once.id,
        revoked: true,
        already_revoked: true,
        revoked_at: first.revoked_at,
      });
    }
    const a = await create(login, "same");
    const b = await create(login, "same");
    const ambiguous = await api("DELETE", "/api/keys/same", login);
    expect(ambiguous.status).toBe(400);
    const { error } = (await ambiguous.json()) as { error: { message: string } };
    expect(error.message).toBe(
      `2 active keys are labelled "same" (${a.id}, ${b.id}); revoke one by its id.`,
    );
    for (const key of [a, b])
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(key.key))).status).toBe(200);
  });

  it("lists and revokes the keys every login key of the account minted, after its own login key is gone", async () => {
    const first = newLoginKey("first login");
    const made = await create(first, "made-by-first");
    const accountId = gw.services.store.getKey(made.id)!.account_id;
    expect((await api("POST", "/api/auth/logout", first)).status).toBe(200);
    const second = loginKeyOf(accountId, "second login");
    const mine = await create(second, "made-by-second");
    const list = (await (await api("GET", "/api/keys", second)).json()) as { data: Created[] };
    expect(list.data.map((k) => k.id)).toEqual([made.id, mine.id]);
    const res = await api("DELETE", "/api/keys/made-by-first", second);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: made.id, already_revoked: false });
    expect((await post(gw, "/v1/chat/completions", chat(), bearer(made.key))).status).toBe(401);
  });

  it("answers 404 for another account's key, the account's keys no login key minted, and an unknown one", async () => {
    const elsewhere = await create(newLoginKey(), "elsewhere");
    const mine = await create(LOGIN_KEY, "mine");
    const owners = gw.services.store.createKey({
      accountId: "acct",
      label: "made-in-dashboard",
      kind: "standard",
    }).key;
    const other = newLoginKey("other");
    const res = await api("DELETE", `/api/keys/${elsewhere.id}`, other);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { code: "not_found" } });
    // The config's standard key and login key, and the dashboard's keys, are the owner's.
    for (const id of ["k1", "kl", "main", owners.id, owners.label, "nothing-here"])
      expect((await api("DELETE", `/api/keys/${id}`, LOGIN_KEY)).status, id).toBe(404);
    const listed = (await (await api("GET", "/api/keys", LOGIN_KEY)).json()) as {
      data: Created[];
    };
    const ids = listed.data.map((k) => k.id);
    expect(ids).toContain(mine.id);
    for (const id of ["k1", "kl", owners.id, elsewhere.id]) expect(ids).not.toContain(id);
    for (const key of [elsewhere, mine])
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(key.key))).status).toBe(200);
  });

  it("asks for an id when a label names several active keys", async () => {
    const login = newLoginKey();
    await create(login, "twin");
    await create(login, "twin");
    const res = await api("DELETE", "/api/keys/twin", login);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "bad_request" } });
  });
});

describe("per-tool key creation limit", () => {
  // The limit counts in the clock's minute: on a gateway of its own with a manual clock, the 21st
  // create stays in the minute of the first 20.
  let outer: TestGateway;
  beforeAll(async () => {
    outer = gw;
    gw = await testGateway({ clock: "manual" });
  });
  afterAll(async () => {
    await gw.close();
    gw = outer;
  });

  it("answers the 21st create in a minute with 429 rate_limit_exceeded and no Retry-After; list and revoke still work", async () => {
    const login = newLoginKey();
    const made: Created[] = [];
    for (let i = 0; i < 20; i++) made.push(await create(login, `bulk-${i}`));
    const limited = await api("POST", "/api/keys", login, { label: "one-too-many" });
    expect(limited.status).toBe(429);
    expect(limited.headers.get("retry-after")).toBeNull();
    expect(await limited.json()).toMatchObject({
      error: { code: "rate_limit_exceeded", type: "rate_limit_exceeded" },
    });

    const list = (await (await api("GET", "/api/keys", login)).json()) as { data: unknown[] };
    expect(list.data).toHaveLength(20);
    expect((await api("DELETE", `/api/keys/${made[0].id}`, login)).status).toBe(200);
    // The limit is per login key: another one is unaffected.
    expect((await api("POST", "/api/keys", newLoginKey(), { label: "fine" })).status).toBe(201);
  });
});

describe("whoami and logout", () => {
  it("tells any key who it is", async () => {
    const res = await api("GET", "/api/auth/whoami", KEY);
    expect(await res.json()).toEqual({
      account_id: "acct",
      key_id: "k1",
      kind: "standard",
      parent_key_id: null,
      label: "main",
      prefix: KEY.slice(0, 7),
    });
    const login = await (await api("GET", "/api/auth/whoami", LOGIN_KEY)).json();
    expect(login).toMatchObject({ key_id: "kl", kind: "login" });
  });

  it("logout revokes the presenting login key only; its tool keys keep working", async () => {
    const login = newLoginKey();
    const tool = await create(login, "survives");
    expect((await api("POST", "/api/auth/logout", KEY)).status).toBe(403);
    const res = await api("POST", "/api/auth/logout", login);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ revoked: true });
    expect((await api("GET", "/api/auth/whoami", login)).status).toBe(401);
    expect((await post(gw, "/v1/chat/completions", chat(), bearer(tool.key))).status).toBe(200);
  });
});
