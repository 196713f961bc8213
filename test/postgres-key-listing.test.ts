import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admin } from "./support/api.js";
import { type CliHome, cliHome, runCli } from "./support/cli.js";
import { baseConfig, chat, LOGIN_KEY, post } from "./support/gateway.js";
import { type GatewaysOnPostgres, gatewaysOnPostgres } from "./support/gateways-on-postgres.js";
import type { ServeProcess } from "./support/serve-process.js";

/**
 * Two real `gateway serve` processes on one Postgres database: whatever happened to a key on one
 * (used, revoked, created) is what every listing on the other shows, and a revoked key is refused
 * there at once. A listing reads the database; a use is written by the gateway that served it as
 * the request is admitted, and that gateway's own listing waits for its writes, so listing on it
 * first is how a test waits for the write without a timer.
 */

interface KeyView {
  id: string;
  label: string;
  kind: string;
  prefix: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

interface CliKey {
  id: string;
  label: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

let cluster: GatewaysOnPostgres;
let a: ServeProcess;
let b: ServeProcess;
/** The owner's dashboard session on B. */
let ownerOnB: string;
let home: CliHome;

beforeAll(async () => {
  cluster = await gatewaysOnPostgres(2, baseConfig());
  [a, b] = cluster.gateways;
  const opened = await fetch(b.ready.owner_url!, { redirect: "manual" });
  ownerOnB = (opened.headers.get("set-cookie") ?? "").split(";")[0];
  home = cliHome({ GATEWAY_API_KEY: LOGIN_KEY, GATEWAY_BASE_URL: b.url });
}, 60_000);
afterAll(async () => {
  home?.remove();
  await cluster?.stop();
});

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** Mints a per-tool key of the login key on `gw`. */
async function mint(gw: ServeProcess, label: string): Promise<{ id: string; key: string }> {
  const res = await post(gw, "/api/keys", { label }, bearer(LOGIN_KEY));
  expect(res.status, await res.clone().text()).toBe(201);
  return (await res.json()) as { id: string; key: string };
}

/** GET /api/keys with the login key: the keys it minted. */
async function toolKeys(gw: ServeProcess): Promise<KeyView[]> {
  const res = await fetch(`${gw.url}/api/keys`, { headers: bearer(LOGIN_KEY) });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: KeyView[] }).data;
}

/** Every listing of B's, each as the key `id` appears in it. */
async function listedOnB(id: string) {
  const api = (await toolKeys(b)).find((k) => k.id === id);
  const dashboardRes = await fetch(`${b.url}/api/dashboard/keys`, {
    headers: { cookie: ownerOnB },
  });
  expect(dashboardRes.status).toBe(200);
  const dashboard = ((await dashboardRes.json()) as { data: KeyView[] }).data.find(
    (k) => k.id === id,
  );
  const adminRes = await admin(b, "GET", "/accounts/acct");
  expect(adminRes.status).toBe(200);
  const adminKey = ((await adminRes.json()) as { keys: KeyView[] }).keys.find((k) => k.id === id);
  const page = await (await fetch(`${b.url}/dashboard`, { headers: { cookie: ownerOnB } })).text();
  const pageRow = page.match(new RegExp(`<tr id="key-${id}">[\\s\\S]*?</tr>`))?.[0] ?? "";
  // The row's time cells: created, then last used.
  const [, pageLastUsed] = [...pageRow.matchAll(/<td class="when[^"]*">([^<]*)<\/td>/g)].map(
    (cell) => cell[1],
  );
  const cli = await runCli(["keys", "list", "--json"], home.env);
  expect(cli.code, cli.stderr).toBe(0);
  const cliKey = (JSON.parse(cli.stdout) as { data: CliKey[] }).data.find((k) => k.id === id);
  return { api, dashboard, admin: adminKey, pageRow, pageLastUsed, cli: cliKey };
}

/** The dashboard page's way of writing a time: UTC, to the minute. */
const pageTime = (ms: number) => new Date(ms).toISOString().replace("T", " ").slice(0, 16);

describe("key listings on another gateway of the same database", () => {
  it("a key used on A is listed on B with that use's last_used_at, in every listing", async () => {
    const { id, key } = await mint(a, "used on A");
    const before = Date.now();
    expect((await post(a, "/v1/chat/completions", chat(), bearer(key))).status).toBe(200);
    const after = Date.now();
    // A's own listing waits for A's write of the use: after it, the row holds it.
    const onA = (await toolKeys(a)).find((k) => k.id === id)!;
    expect(onA.last_used_at).toBeGreaterThanOrEqual(before);
    expect(onA.last_used_at).toBeLessThanOrEqual(after);

    // Soft: a failure names every listing that shows the key stale, not only the first.
    const onB = await listedOnB(id);
    expect.soft(onB.api, "GET /api/keys").toEqual(onA);
    expect.soft(onB.dashboard, "GET /api/dashboard/keys").toEqual(onA);
    expect
      .soft(onB.admin, "GET /api/admin/accounts/acct")
      .toMatchObject({ id, last_used_at: onA.last_used_at, revoked_at: null });
    expect.soft(onB.cli, "gateway keys list --json").toMatchObject({
      id,
      last_used_at: new Date(onA.last_used_at!).toISOString(),
      revoked_at: null,
    });
    expect.soft(onB.pageLastUsed, "the dashboard page").toBe(pageTime(onA.last_used_at!));
  }, 30_000);

  it("a key B has served, revoked on A, is refused on B at once and listed revoked there", async () => {
    const { id, key } = await mint(a, "revoked on A");
    expect((await post(b, "/v1/chat/completions", chat(), bearer(key))).status).toBe(200);
    const revoked = await fetch(`${a.url}/api/keys/${id}`, {
      method: "DELETE",
      headers: bearer(LOGIN_KEY),
    });
    expect(revoked.status).toBe(200);
    const { revoked_at } = (await revoked.json()) as { revoked_at: number };

    const refused = await post(b, "/v1/chat/completions", chat(), bearer(key));
    expect(refused.status).toBe(401);
    expect(await refused.text()).toContain("revoked");

    const onB = await listedOnB(id);
    for (const listed of [onB.api, onB.dashboard, onB.admin])
      expect(listed).toMatchObject({ id, revoked_at });
    expect(onB.cli).toMatchObject({ id, revoked_at: new Date(revoked_at).toISOString() });
    expect(onB.pageRow).toContain(`revoked ${pageTime(revoked_at)}`);
  }, 30_000);

  it("a key created on A is listed on B at once, with its label, and works there", async () => {
    const { id, key } = await mint(a, "made on A");
    const onB = await listedOnB(id);
    for (const listed of [onB.api, onB.dashboard, onB.admin, onB.cli])
      expect(listed).toMatchObject({
        id,
        label: "made on A",
        last_used_at: null,
        revoked_at: null,
      });
    expect(onB.pageRow).toContain("made on A");
    expect((await post(b, "/v1/chat/completions", chat(), bearer(key))).status).toBe(200);
  }, 30_000);
});
