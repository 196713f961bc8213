import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { quota } from "./support/api.js";
import { dashboardCsrf, type OwnerBrowser, ownerSession } from "./support/cli.js";
import { baseConfigWith, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The dashboard's forms over HTTP, as a browser without script posts them: each action changes
 * the database, and each is refused without the session, from another origin or without the
 * session's CSRF token. (test/dashboard-browser.test.ts clicks the same forms in Chromium.)
 */

let gw: TestGateway;

beforeAll(async () => {
  gw = await testGateway({
    config: baseConfigWith({
      providers: [{ id: "openai", wire: "openai", base_url: "http://127.0.0.1:9/v1" }],
      accounts: (accounts) => [{ ...accounts[0], payg: { limit_idr: 10_000 } }, accounts[1]],
    }),
  });
});
afterAll(() => gw.close());

interface Signed extends OwnerBrowser {
  csrf: string;
}

async function signIn(accountId = "acct"): Promise<Signed> {
  const owner = await ownerSession(gw, accountId);
  return { ...owner, csrf: await dashboardCsrf(gw, owner) };
}

async function form(
  path: string,
  fields: Record<string, string>,
  headers: Record<string, string> = {},
): Promise<{ status: number; html: string; location: string | null; setCookie: string | null }> {
  const res = await fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(fields).toString(),
    redirect: "manual",
  });
  return {
    status: res.status,
    html: await res.text(),
    location: res.headers.get("location"),
    setCookie: res.headers.get("set-cookie"),
  };
}

const as = (owner: Signed, extra: Record<string, string> = {}) => ({
  cookie: owner.cookie,
  origin: gw.url,
  ...extra,
});

/** Every form of the dashboard, with fields that would be accepted. */
const actions: { name: string; path: () => string; fields: Record<string, string> }[] = [
  {
    name: "add a provider key",
    path: () => "/dashboard/byok",
    fields: { provider: "openai", key: "sk-x-0000" },
  },
  { name: "remove a provider key", path: () => "/dashboard/byok/byok_none/remove", fields: {} },
  { name: "set PAYG", path: () => "/dashboard/payg", fields: { enabled: "1", limit_idr: "1" } },
  { name: "sign out", path: () => "/dashboard/logout", fields: {} },
];

describe("the dashboard's forms", () => {
  it.each(actions)(
    "$name: refused without a session, cross-origin, or without the CSRF token",
    async (action) => {
      const owner = await signIn();
      const before = {
        byok: gw.services.store.listByok("acct").length,
        payg: gw.services.store.getAccount("acct")!.payg_limit_micro,
      };
      const noSession = await form(
        action.path(),
        { ...action.fields, csrf_token: owner.csrf },
        { origin: gw.url },
      );
      expect(noSession.status).toBe(401);
      expect(noSession.html).toContain("Sign in to the gateway dashboard");
      const crossSite = await form(
        action.path(),
        { ...action.fields, csrf_token: owner.csrf },
        as(owner, { origin: "https://evil.example", "sec-fetch-site": "cross-site" }),
      );
      expect(crossSite.status).toBe(403);
      expect(crossSite.html).toContain("Cross-origin form posts are not accepted.");
      const noToken = await form(action.path(), action.fields, as(owner));
      expect(noToken.status).toBe(403);
      expect(noToken.html).toContain("CSRF token is missing or wrong");
      const otherToken = await form(
        action.path(),
        { ...action.fields, csrf_token: (await signIn()).csrf },
        as(owner),
      );
      expect(otherToken.status).toBe(403);
      // None of them changed anything, and the session still works.
      expect(gw.services.store.listByok("acct").length).toBe(before.byok);
      expect(gw.services.store.getAccount("acct")!.payg_limit_micro).toBe(before.payg);
      expect(
        (await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })).status,
      ).toBe(200);
    },
  );

  it("adds a provider key, shown only by its last four, and removes it", async () => {
    const owner = await signIn();
    const secret = "sk-form-added-secret-77zz";
    const added = await form(
      "/dashboard/byok",
      { provider: "openai", label: "ci", key: ` ${secret} `, csrf_token: owner.csrf },
      as(owner),
    );
    expect(added).toMatchObject({ status: 303, location: "/dashboard" });
    const row = gw.services.store.listByok("acct").find((b) => b.label === "ci")!;
    expect(row).toMatchObject({ provider_id: "openai", secret });
    const page = await (
      await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })
    ).text();
    expect(page).toContain("Provider key &quot;ci&quot; (...77zz) added for openai.");
    expect(page).not.toContain(secret);

    // Another account's owner cannot remove it: nothing happens.
    const stranger = await signIn("poor");
    await form(`/dashboard/byok/${row.id}/remove`, { csrf_token: stranger.csrf }, as(stranger));
    expect(gw.services.store.listByok("acct").some((b) => b.id === row.id)).toBe(true);

    const removed = await form(
      `/dashboard/byok/${row.id}/remove`,
      { csrf_token: owner.csrf },
      as(owner),
    );
    expect(removed).toMatchObject({ status: 303, location: "/dashboard" });
    expect(gw.services.store.listByok("acct").some((b) => b.id === row.id)).toBe(false);
  });

  it("refuses a provider key for an unknown or mock provider, or an empty one, with a 400 page", async () => {
    const owner = await signIn();
    const before = gw.services.store.listByok("acct").length;
    for (const [fields, message] of [
      [{ provider: "nope", key: "sk-1" }, 'Unknown provider "nope" for BYOK.'],
      [{ provider: "mock", key: "sk-1" }, 'Unknown provider "mock" for BYOK.'],
      [{ provider: "openai", key: "  " }, "A provider key cannot be empty."],
    ] as const) {
      const res = await form("/dashboard/byok", { ...fields, csrf_token: owner.csrf }, as(owner));
      expect(res.status).toBe(400);
      expect(res.html).toContain(message.replace(/"/g, "&quot;"));
    }
    expect(gw.services.store.listByok("acct").length).toBe(before);
  });

  it("turns PAYG off and on with a new limit, keeping its window; a bad limit is a 400 page", async () => {
    const owner = await signIn();
    const window = gw.services.store.getAccount("acct")!.payg_window_seconds;
    const off = await form(
      "/dashboard/payg",
      { limit_idr: "10000", csrf_token: owner.csrf },
      as(owner),
    );
    expect(off.status).toBe(303);
    expect((await quota(gw)).payg).toBeNull();
    expect(gw.services.store.getAccount("acct")!.payg_enabled).toBe(0);

    const on = await form(
      "/dashboard/payg",
      { enabled: "1", limit_idr: "25000.25", csrf_token: owner.csrf },
      as(owner),
    );
    expect(on.status).toBe(303);
    expect((await quota(gw)).payg).toMatchObject({ enabled: true, limit_idr: 25_000.25 });
    expect(gw.services.store.getAccount("acct")!).toMatchObject({
      payg_limit_micro: 25_000_250_000,
      payg_window_seconds: window,
    });

    for (const limit of ["-1", "abc", "", "1e30"]) {
      const bad = await form(
        "/dashboard/payg",
        { enabled: "1", limit_idr: limit, csrf_token: owner.csrf },
        as(owner),
      );
      expect(bad.status, limit).toBe(400);
      expect(bad.html).toContain("The PAYG limit must be a number of IDR");
    }
    // Finer than the micro-IDR the gateway stores: said so, not rounded to 25000.
    const finer = await form(
      "/dashboard/payg",
      { enabled: "1", limit_idr: "25000.0000004", csrf_token: owner.csrf },
      as(owner),
    );
    expect(finer.status).toBe(400);
    expect(finer.html).toContain(
      "The PAYG limit must have at most 6 decimals: 0.000001 IDR (one micro-IDR) is the smallest amount the gateway stores.",
    );
    expect((await quota(gw)).payg).toMatchObject({ limit_idr: 25_000.25 });
  });

  it("counts a key's label in characters: 100 emoji make one key, whole; 101 characters are a 400 naming the label, kept as typed", async () => {
    const owner = await signIn();
    const labels = () => gw.services.store.listKeys("acct").map((k) => k.label);
    const hundred = "🔑".repeat(100);
    const made = await form(
      "/dashboard/keys",
      { label: hundred, csrf_token: owner.csrf },
      as(owner),
    );
    expect(made).toMatchObject({ status: 303, location: "/dashboard" });
    expect(labels()).toContain(hundred);

    const before = labels().length;
    const tooLong = `${"a".repeat(99)}🔑🔑`;
    const refused = await form(
      "/dashboard/keys",
      { label: tooLong, csrf_token: owner.csrf },
      as(owner),
    );
    expect(refused.status).toBe(400);
    expect(refused.html).toContain(
      "A key&#39;s label can be at most 100 characters; this one has 101.",
    );
    expect(refused.html).toMatch(
      new RegExp(
        `<input name="label" required value="${tooLong}" aria-invalid="true" aria-describedby="key-error" autofocus>`,
      ),
    );
    expect(labels()).toHaveLength(before);
  });

  it("a refused form comes back as it was typed, its field marked, never with the provider key", async () => {
    const owner = await signIn();
    const secret = "sk-refused-form-secret-9q9q";
    const byok = await form(
      "/dashboard/byok",
      { provider: "nope", label: "team 🔑 key", key: secret, csrf_token: owner.csrf },
      as(owner),
    );
    expect(byok.status).toBe(400);
    expect(byok.html).toContain('value="team 🔑 key"');
    expect(byok.html).toContain(
      '<select name="provider" required aria-invalid="true" aria-describedby="byok-error" autofocus>',
    );
    expect(byok.html).not.toContain(secret);
    expect(byok.html).not.toContain(secret.slice(-4));

    const payg = await form(
      "/dashboard/payg",
      { limit_idr: "12.0000004", csrf_token: owner.csrf },
      as(owner),
    );
    expect(payg.status).toBe(400);
    expect(payg.html).toMatch(
      /name="limit_idr"[^>]* value="12\.0000004" aria-invalid="true" aria-describedby="payg-error" autofocus/,
    );
    // The switch as it was sent (off), not as the account has it.
    expect(payg.html).toContain(
      '<input type="checkbox" name="enabled" value="1"> Pay as you go on',
    );
    expect(gw.services.store.getAccount("acct")!.payg_limit_micro).not.toBe(12_000_000);
  });

  it("a key's label typed while signed out comes back whole after signing in, emoji and all", async () => {
    const label = `${"🚀".repeat(60)} ci`;
    const signedOut = await form(
      "/dashboard/keys",
      { label, csrf_token: "stale" },
      { origin: gw.url },
    );
    expect(signedOut.status).toBe(401);
    const draft = /gateway_form_draft=[^;]+/.exec(signedOut.setCookie ?? "")![0];
    const owner = await signIn();
    const page = await fetch(`${gw.url}/dashboard`, {
      headers: { cookie: `${owner.cookie}; ${draft}` },
    });
    expect(await page.text()).toContain(`<input name="label" required value="${label}" autofocus>`);
  });

  it("shows one request of the account, and nobody else's", async () => {
    await post(gw, "/v1/chat/completions", chat("detail"));
    const [row] = gw.services.store.requestLog("acct", 1);
    const owner = await signIn();
    const res = await fetch(`${gw.url}/dashboard/requests/${row.id}`, {
      headers: { cookie: owner.cookie },
    });
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain(`<dd id="request-id"><code>${row.id}</code></dd>`);
    expect(html).toContain(`${row.input_tokens} in, ${row.output_tokens} out`);
    const stranger = await signIn("poor");
    const foreign = await fetch(`${gw.url}/dashboard/requests/${row.id}`, {
      headers: { cookie: stranger.cookie },
    });
    expect(foreign.status).toBe(404);
    expect(await foreign.text()).not.toContain(row.id);
    const signedOut = await fetch(`${gw.url}/dashboard/requests/${row.id}`);
    expect(signedOut.status).toBe(401);
  });

  it("sign-out ends the session on the server and clears the cookie", async () => {
    const owner = await signIn();
    const other = await signIn();
    const res = await form("/dashboard/logout", { csrf_token: owner.csrf }, as(owner));
    expect(res.status).toBe(200);
    expect(res.html).toContain("Signed out");
    expect(res.setCookie).toMatch(/^gateway_session=;.*Max-Age=0/);
    expect((await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })).status).toBe(
      401,
    );
    // Only that browser's session ended.
    expect((await fetch(`${gw.url}/dashboard`, { headers: { cookie: other.cookie } })).status).toBe(
      200,
    );
  });
});
