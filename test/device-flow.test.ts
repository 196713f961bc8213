import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createOwnerLink } from "../src/server/auth/owner-session.js";
import { approvalPage, dashboardCsrf, decide, ownerDecides, ownerSession } from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/** The device flow and the owner dashboard over real HTTP (no CLI here; see cli.test.ts). */

let gw: TestGateway;
let shortLived: TestGateway;

beforeAll(async () => {
  [gw, shortLived] = await Promise.all([
    testGateway({ devicePollIntervalSeconds: 1, deviceCodeTtlSeconds: 60 }),
    testGateway({ devicePollIntervalSeconds: 1, deviceCodeTtlSeconds: 1 }),
  ]);
});
afterAll(async () => {
  await Promise.all([gw?.close(), shortLived?.close()]);
});

interface DeviceCode {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

async function deviceCode(
  g: { url: string } = gw,
  clientName = "test client",
): Promise<DeviceCode> {
  const res = await post(g, "/api/auth/device/code", { client_name: clientName }, {});
  expect(res.status).toBe(200);
  return (await res.json()) as DeviceCode;
}

async function poll(deviceCodeValue: string, g: { url: string } = gw) {
  const res = await post(g, "/api/auth/device/token", { device_code: deviceCodeValue }, {});
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The stored row of a user code: its status, sealed key and device code hash among the rest. */
async function sealedValue(g: TestGateway, userCode: string) {
  const row = await g.services.repos.deviceCodes.byUserCode(userCode.replace("-", ""));
  if (!row) throw new Error(`no device code row for ${userCode}`);
  return row;
}

describe("device authorization endpoints", () => {
  it("issues a device code, an XXXX-XXXX consonant user code and the verification URIs", async () => {
    const dc = await deviceCode();
    expect(dc.user_code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
    expect(Buffer.from(dc.device_code, "base64url")).toHaveLength(32);
    expect(dc.verification_uri).toBe(`${gw.url}/dashboard/device`);
    expect(dc.verification_uri_complete).toBe(
      `${gw.url}/dashboard/device?user_code=${dc.user_code}`,
    );
    expect(dc).toMatchObject({ expires_in: 60, interval: 1 });
    // Only a hash of the device code is stored.
    const row = await sealedValue(gw, dc.user_code);
    expect(row.device_code_hash).not.toContain(dc.device_code);
    expect(JSON.stringify(row)).not.toContain(dc.device_code);
  });

  it("answers authorization_pending, then slow_down (interval +5 s) when polled faster than the interval", async () => {
    const dc = await deviceCode();
    expect(await poll(dc.device_code)).toMatchObject({
      status: 400,
      body: { error: "authorization_pending" },
    });
    expect(await poll(dc.device_code)).toMatchObject({
      status: 400,
      body: { error: "slow_down", interval: 6 },
    });
    expect(await poll(dc.device_code)).toMatchObject({
      status: 400,
      body: { error: "slow_down", interval: 11 },
    });
  });

  it("refuses an unknown device code and a body without one", async () => {
    expect(await poll("not-a-device-code")).toMatchObject({
      status: 400,
      body: { error: "invalid_grant" },
    });
    const res = await post(gw, "/api/auth/device/token", {}, {});
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: "invalid_request" });
  });
});

describe("owner session", () => {
  it("startGateway returns a one-time owner URL for the first config account", async () => {
    expect(gw.ownerUrl).toMatch(
      new RegExp(`^${gw.url}/dashboard/login\\?token=[A-Za-z0-9_-]{43}$`),
    );
    const first = await fetch(gw.ownerUrl!, { redirect: "manual" });
    expect(first.status).toBe(303);
    expect(first.headers.get("location")).toBe("/dashboard");
    const cookie = first.headers.get("set-cookie")!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect(cookie).toMatch(/Path=\//);
    const dashboard = await fetch(`${gw.url}/dashboard`, {
      headers: { cookie: cookie.split(";")[0] },
    });
    expect(dashboard.status).toBe(200);
    expect(await dashboard.text()).toContain("Dashboard of account acct");
    // The token works once.
    const again = await fetch(gw.ownerUrl!, { redirect: "manual" });
    expect(again.status).toBe(401);
    expect(again.headers.get("set-cookie")).toBeNull();
    expect(await again.text()).toContain("already used");
  });

  it("shows a sign-in page (401) on the approval page without a session", async () => {
    const dc = await deviceCode();
    const page = await approvalPage(gw, undefined, dc.user_code);
    expect(page.status).toBe(401);
    expect(page.html).toContain("gateway serve");
    expect(page.html).toContain('<pre class="cmd">npx gateway dashboard</pre>');
    expect(page.html).toContain("<code>npx gateway owner-link</code>");
    const posted = await decide(gw, "approve", { user_code: dc.user_code, csrf_token: "x" }, {});
    expect(posted.status).toBe(401);
    expect((await sealedValue(gw, dc.user_code)).status).toBe("pending");
  });
});

describe("signing in from a page that needed it", () => {
  const linkFor = (g: TestGateway) => createOwnerLink(g.services.repos.sessions, "acct", g.url);

  it("returns to the approval page that asked for the sign-in", async () => {
    const dc = await deviceCode();
    const signIn = await fetch(dc.verification_uri_complete);
    expect(signIn.status).toBe(401);
    expect(await signIn.text()).toContain("you come back to this page");
    const remembered = signIn.headers.get("set-cookie")!;
    expect(remembered).toMatch(/^gateway_return_to=/);
    expect(remembered).toMatch(/SameSite=Lax/);
    const login = await fetch(await linkFor(gw), {
      redirect: "manual",
      headers: { cookie: remembered.split(";")[0] },
    });
    expect(login.status).toBe(303);
    expect(login.headers.get("location")).toBe(
      `/dashboard/device?user_code=${encodeURIComponent(dc.user_code)}`,
    );
  });

  it("follows a next parameter only to a dashboard path of this gateway", async () => {
    const cases: [string, string][] = [
      ["/dashboard/device?user_code=BCDF-GHJK", "/dashboard/device?user_code=BCDF-GHJK"],
      ["https://evil.example/dashboard", "/dashboard"],
      ["//evil.example/dashboard", "/dashboard"],
      ["/\\evil.example/dashboard", "/dashboard"],
      ["/v1/models", "/dashboard"],
      ["/dashboard/login?token=x", "/dashboard"],
    ];
    for (const [next, location] of cases) {
      const res = await fetch(`${await linkFor(gw)}&next=${encodeURIComponent(next)}`, {
        redirect: "manual",
      });
      expect([next, res.headers.get("location")]).toEqual([next, location]);
    }
  });
});

describe("a login whose CLI went away", () => {
  it("is cancelled by the CLI: the page refuses it, links back, and the poll ends", async () => {
    const dc = await deviceCode();
    const cancel = await post(gw, "/api/auth/device/cancel", { device_code: dc.device_code }, {});
    expect(cancel.status).toBe(200);
    expect(await cancel.json()).toEqual({ cancelled: true });
    const owner = await ownerSession(gw);
    const page = await approvalPage(gw, owner, dc.user_code);
    expect(page.status).toBe(400);
    expect(page.html).toContain("This login was cancelled");
    expect(page.html).toContain('<a href="/dashboard/device">Enter another code</a>');
    expect(page.csrf).toBeUndefined();
    const csrf = await dashboardCsrf(gw, owner);
    const posted = await decide(
      gw,
      "approve",
      { user_code: dc.user_code, csrf_token: csrf },
      { cookie: owner.cookie, origin: gw.url },
    );
    expect(posted.status).toBe(400);
    expect(posted.html).toContain("This login was cancelled");
    expect((await sealedValue(gw, dc.user_code)).status).toBe("cancelled");
    expect(await poll(dc.device_code)).toMatchObject({ body: { error: "invalid_grant" } });
    const again = await post(gw, "/api/auth/device/cancel", { device_code: dc.device_code }, {});
    expect(again.status).toBe(400);
  });

  it("counts as cancelled once its CLI has not polled for a while", async () => {
    let now = Date.now();
    const clocked = await testGateway({ devicePollIntervalSeconds: 1, now: () => now });
    try {
      const dc = await deviceCode(clocked);
      const owner = await ownerSession(clocked);
      now += 20_000;
      expect((await approvalPage(clocked, owner, dc.user_code)).status).toBe(200);
      now += 20_000;
      const page = await approvalPage(clocked, owner, dc.user_code);
      expect(page.status).toBe(400);
      expect(page.html).toContain("This login was cancelled");
      // A CLI that comes back (a laptop waking up) makes it approvable again.
      expect(await poll(dc.device_code, clocked)).toMatchObject({
        body: { error: "authorization_pending" },
      });
      expect((await approvalPage(clocked, owner, dc.user_code)).status).toBe(200);
    } finally {
      await clocked.close();
    }
  });
});

describe("approval over HTTP", () => {
  it("approves: the login key is handed out exactly once and works", async () => {
    const dc = await deviceCode(gw, "laptop");
    const owner = await ownerSession(gw);
    // Any case, with or without the dash.
    const page = await approvalPage(gw, owner, dc.user_code.replace("-", "").toLowerCase());
    expect(page.status).toBe(200);
    expect(page.html).toContain(`id="user-code">${dc.user_code}<`);
    expect(page.html).toMatch(/check that this code matches/i);
    expect(page.html).not.toContain("<script");
    expect(page.headers.get("x-frame-options")).toBe("DENY");
    expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    expect(page.headers.get("cache-control")).toBe("no-store");

    const approved = await decide(
      gw,
      "approve",
      { user_code: dc.user_code, csrf_token: page.csrf! },
      { cookie: owner.cookie, origin: gw.url, "sec-fetch-site": "same-origin" },
    );
    expect(approved.status).toBe(200);
    expect(approved.html).toContain("Login approved");
    // Held sealed, never in plaintext, until the poll collects it.
    const row = await sealedValue(gw, dc.user_code);
    expect(row.status).toBe("approved");
    expect(row.key_value_sealed).toBeTruthy();
    expect(row.key_value_sealed).not.toContain("kn-");

    const token = await poll(dc.device_code);
    expect(token.status).toBe(200);
    expect(token.body).toMatchObject({ token_type: "bearer", account_id: "acct" });
    const key = token.body.access_token as string;
    expect(key).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
    const stored = gw.services.store.getKey(token.body.key_id as string)!;
    expect(stored).toMatchObject({
      kind: "login",
      label: "laptop",
      account_id: "acct",
      revoked_at: null,
    });
    expect(await sealedValue(gw, dc.user_code)).toMatchObject({
      status: "consumed",
      key_value_sealed: null,
    });

    const second = await poll(dc.device_code);
    expect(second.status).toBe(400);
    expect(["invalid_grant", "expired_token"]).toContain(second.body.error);

    const whoami = await fetch(`${gw.url}/api/auth/whoami`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(await whoami.json()).toMatchObject({
      account_id: "acct",
      kind: "login",
      label: "laptop",
    });
    const completion = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${key}`,
    });
    expect(completion.status).toBe(200);
  });

  it("denies: the poll answers access_denied and no key is minted", async () => {
    const before = gw.services.store.listKeys("acct").length;
    const dc = await deviceCode();
    const denied = await ownerDecides(gw, dc.user_code, "deny");
    expect(denied.status).toBe(200);
    expect(denied.html).toContain("Login denied");
    expect(await poll(dc.device_code)).toMatchObject({
      status: 400,
      body: { error: "access_denied" },
    });
    expect(gw.services.store.listKeys("acct")).toHaveLength(before);
  });

  it("refuses a used code, an unknown code and a malformed code with clear pages", async () => {
    const dc = await deviceCode();
    await ownerDecides(gw, dc.user_code, "approve");
    const owner = await ownerSession(gw);
    const used = await approvalPage(gw, owner, dc.user_code);
    expect(used.status).toBe(400);
    expect(used.html).toContain("already used");
    expect(used.csrf).toBeUndefined();
    const unknown = await approvalPage(gw, owner, "BBBB-BBBB");
    expect(unknown.status).toBe(404);
    expect(unknown.html).toContain("Unknown code");
    expect(unknown.html).toContain('<a href="/dashboard">Go to the dashboard</a>');
    expect(used.html).toContain('<a href="/dashboard/device">Enter another code</a>');
    const malformed = await approvalPage(gw, owner, "AEIO-U123");
    expect(malformed.status).toBe(404);
    const again = await ownerDecides(gw, dc.user_code, "approve").catch((e: Error) => e.message);
    expect(again).toMatch(/approval page answered 400/);
  });

  it("ends with expired_token when the code expires, and the page says so", async () => {
    const dc = await deviceCode(shortLived);
    const owner = await ownerSession(shortLived);
    await new Promise((r) => setTimeout(r, 1100));
    expect(await poll(dc.device_code, shortLived)).toMatchObject({
      status: 400,
      body: { error: "expired_token" },
    });
    const page = await approvalPage(shortLived, owner, dc.user_code);
    expect(page.status).toBe(400);
    expect(page.html).toContain("expired");
  });

  it("revokes a key that was approved but expired before anyone collected it", async () => {
    const dc = await deviceCode(shortLived);
    await ownerDecides(shortLived, dc.user_code, "approve");
    const keyId = (await sealedValue(shortLived, dc.user_code)).key_id!;
    await new Promise((r) => setTimeout(r, 1100));
    expect(await poll(dc.device_code, shortLived)).toMatchObject({
      body: { error: "expired_token" },
    });
    expect(shortLived.services.store.getKey(keyId)!.revoked_at).not.toBeNull();
  });
});

describe("CSRF and origin checks on the approval form", () => {
  it("refuses a missing token, a wrong token, another session's token and a cross-origin post", async () => {
    const dc = await deviceCode();
    const owner = await ownerSession(gw);
    const other = await ownerSession(gw);
    const page = await approvalPage(gw, owner, dc.user_code);
    const otherPage = await approvalPage(gw, other, dc.user_code);
    expect(page.csrf).toBeTruthy();
    expect(otherPage.csrf).not.toBe(page.csrf);
    const attempts: { form: Record<string, string>; headers: Record<string, string> }[] = [
      { form: { user_code: dc.user_code }, headers: { cookie: owner.cookie } },
      { form: { user_code: dc.user_code, csrf_token: "wrong" }, headers: { cookie: owner.cookie } },
      {
        form: { user_code: dc.user_code, csrf_token: otherPage.csrf! },
        headers: { cookie: owner.cookie },
      },
      {
        form: { user_code: dc.user_code, csrf_token: page.csrf! },
        headers: { cookie: owner.cookie, origin: "http://evil.example" },
      },
      {
        form: { user_code: dc.user_code, csrf_token: page.csrf! },
        headers: { cookie: owner.cookie, "sec-fetch-site": "cross-site" },
      },
      {
        form: { user_code: dc.user_code, csrf_token: page.csrf! },
        headers: { cookie: owner.cookie, origin: "null" },
      },
    ];
    for (const attempt of attempts) {
      const res = await decide(gw, "approve", attempt.form, attempt.headers);
      expect(res.status).toBe(403);
      expect(res.html).toContain("Request refused");
    }
    expect((await sealedValue(gw, dc.user_code)).status).toBe("pending");
    // The genuine form still works afterwards.
    const ok = await decide(
      gw,
      "approve",
      { user_code: dc.user_code, csrf_token: page.csrf! },
      { cookie: owner.cookie, origin: gw.url },
    );
    expect(ok.status).toBe(200);
  });
});

describe("dashboard keys", () => {
  it("lists the account's keys and revokes one with the CSRF-protected form; the key then gets 401", async () => {
    const owner = await ownerSession(gw);
    const { value, key } = gw.services.store.createKey({
      accountId: "acct",
      label: "to-revoke",
      kind: "standard",
    });
    const page = await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } });
    const html = await page.text();
    expect(html).toContain(key.id);
    expect(html).toContain("to-revoke");
    expect(html).not.toContain(value);
    const csrf = /name="csrf-token" content="([^"]+)"/.exec(html)![1];
    const form = (token: string) =>
      fetch(`${gw.url}/dashboard/keys/${key.id}/revoke`, {
        method: "POST",
        headers: {
          cookie: owner.cookie,
          "content-type": "application/x-www-form-urlencoded",
          origin: gw.url,
        },
        body: new URLSearchParams({ csrf_token: token }).toString(),
        redirect: "manual",
      });
    expect((await form("wrong")).status).toBe(403);
    expect(
      (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${value}` })).status,
    ).toBe(200);
    const revoked = await form(csrf);
    expect(revoked.status).toBe(303);
    const after = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${value}`,
    });
    expect(after.status).toBe(401);
    expect(await after.text()).toBe(
      "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
    );
  });

  it("offers create/list/revoke as JSON under /api/dashboard/keys with the x-csrf-token header", async () => {
    const owner = await ownerSession(gw);
    const csrf = await dashboardCsrf(gw, owner);
    const api = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
      fetch(`${gw.url}/api/dashboard/keys${path}`, {
        method,
        headers: { cookie: owner.cookie, "content-type": "application/json", ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });

    expect((await fetch(`${gw.url}/api/dashboard/keys`)).status).toBe(401);
    const noCsrf = await api("POST", "", {}, { label: "dash" });
    expect(noCsrf.status).toBe(403);
    expect(await noCsrf.json()).toMatchObject({ error: { code: "forbidden" } });
    const crossOrigin = await api(
      "POST",
      "",
      { "x-csrf-token": csrf, origin: "http://evil.example" },
      { label: "x" },
    );
    expect(crossOrigin.status).toBe(403);

    const created = await api(
      "POST",
      "",
      { "x-csrf-token": csrf },
      { label: "dash", shared: true },
    );
    expect(created.status).toBe(201);
    const body = (await created.json()) as { id: string; key: string; kind: string };
    expect(body.kind).toBe("shared");
    const list = (await (await api("GET", "", {})).json()) as { data: { id: string }[] };
    expect(list.data.map((k) => k.id)).toContain(body.id);
    expect(JSON.stringify(list)).not.toContain(body.key);
    expect((await api("DELETE", `/${body.id}`, {})).status).toBe(403);
    const deleted = await api("DELETE", `/${body.id}`, { "x-csrf-token": csrf });
    expect(await deleted.json()).toMatchObject({ id: body.id, revoked: true });
    expect((await api("DELETE", "/k-of-nobody", { "x-csrf-token": csrf })).status).toBe(404);
  });

  it("does not let a session revoke a key of another account", async () => {
    const owner = await ownerSession(gw);
    const csrf = await dashboardCsrf(gw, owner);
    const res = await fetch(`${gw.url}/api/dashboard/keys/kp`, {
      method: "DELETE",
      headers: { cookie: owner.cookie, "x-csrf-token": csrf },
    });
    expect(res.status).toBe(404);
    expect(gw.services.store.getKey("kp")!.revoked_at).toBeNull();
  });
});

describe("device codes across accounts (issue 29, point 5)", () => {
  // A gateway of its own: the tests above spent this address's device codes for the minute.
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await testGateway({ devicePollIntervalSeconds: 1, deviceCodeTtlSeconds: 60 });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it("lets only the account whose owner opened a code deny or approve it", async () => {
    const dc = await deviceCode(gw);
    const owner = await ownerSession(gw, "acct");
    const mine = await approvalPage(gw, owner, dc.user_code);
    expect(mine.status).toBe(200);

    // Another account's owner who learnt the code: told it is unknown, and it stays pending.
    const stranger = await ownerSession(gw, "poor");
    const theirs = await approvalPage(gw, stranger, dc.user_code);
    expect(theirs.status).toBe(404);
    expect(theirs.html).toContain("No login request has this code.");
    expect(theirs.html).not.toContain('action="/dashboard/device/deny"');
    const strangerCsrf = await dashboardCsrf(gw, stranger);
    for (const decision of ["deny", "approve"] as const) {
      const refused = await decide(
        gw,
        decision,
        { user_code: dc.user_code, csrf_token: strangerCsrf },
        { cookie: stranger.cookie, origin: gw.url },
      );
      expect({ decision, status: refused.status }).toEqual({ decision, status: 404 });
    }
    expect((await sealedValue(gw, dc.user_code)).status).toBe("pending");
    expect((await poll(dc.device_code, gw)).body.error).toBe("authorization_pending");

    // Its own owner still decides it.
    const denied = await decide(
      gw,
      "deny",
      { user_code: dc.user_code, csrf_token: mine.csrf! },
      { cookie: owner.cookie, origin: gw.url },
    );
    expect(denied.html).toMatch(/denied/i);
    expect((await poll(dc.device_code, gw)).body.error).toBe("access_denied");
  });

  it("shows a client name's bidi and control characters as U+FFFD, inside <bdi>", async () => {
    const dc = await deviceCode(gw, "evil\u202Egnp.exe\u2066\u200Bx\u0007y");
    const page = await approvalPage(gw, await ownerSession(gw), dc.user_code);
    expect(page.status).toBe(200);
    expect(page.html).toContain("<bdi>evil\uFFFDgnp.exe\uFFFD\uFFFDx\uFFFDy</bdi>");
    expect(page.html).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200B]/);
    expect(page.html).not.toContain("\u0007");
    // The login key it mints is labelled with the cleaned name too.
    const approved = await ownerDecides(gw, dc.user_code, "approve");
    expect(approved.status).toBe(200);
    const row = await sealedValue(gw, dc.user_code);
    expect(gw.services.store.getKey(row.key_id!)!.label).toBe(
      "evil\uFFFDgnp.exe\uFFFD\uFFFDx\uFFFDy",
    );
  });
});
