import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createOwnerLink } from "../src/server/auth/owner-session.js";
import { startGateway } from "../src/server/gateway.js";
import { connectChromium, haveChromium } from "./support/browser.js";
import { cliHome, runCli } from "./support/cli.js";
import { fakeUpstream, openaiError } from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfig,
  baseConfigWith,
  chat,
  LOGIN_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * An adversarial developer's pass over the test kit, serve's flags and the owner's pages:
 * only what the suites before it do not cover.
 */

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("provider credentials a provider echoes back", () => {
  it("captured bodies (listRequests, /api/admin/requests) never show a provider key the provider's answer repeats", async () => {
    const secret = "sk-proj-hunt-echoed-secret-0123456789";
    // OpenAI-compatible servers answer a refused key with a message that names it.
    const upstream = await fakeUpstream("openai", (req) =>
      openaiError(
        401,
        `Incorrect API key provided: ${String(req.headers.authorization).replace(/^Bearer /, "")}.`,
        "invalid_api_key",
      ),
    );
    cleanups.push(() => upstream.close());
    const gw = await startGateway({
      config: baseConfig({
        providers: [{ id: "oa", wire: "openai", base_url: upstream.url, api_keys: [secret] }],
        models: [{ name: "gpt-echo", provider: "oa", price_input_per_mtok: 1000 }],
        routes: [],
      }),
      captureBodies: true,
    });
    cleanups.push(() => gw.close());
    const res = await post(gw, "/v1/chat/completions", chat("hello", "gpt-echo"));
    expect(res.status).toBe(503);
    expect(await res.text()).not.toContain(secret);
    const [row] = await gw.listRequests({ limit: 1 });
    // The exchange is there, with the provider's status...
    expect(row.upstream?.[0]).toMatchObject({ provider: "oa", status: 401 });
    // ...but not the key.
    expect(JSON.stringify(row)).not.toContain(secret);
    const listed = await fetch(`${gw.url}/api/admin/requests?limit=1`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(listed.status).toBe(200);
    expect(await listed.text()).not.toContain(secret);
  });
});

describe("serve --keepalive-ms 0", () => {
  let serve: ServeProcess | undefined;
  afterEach(async () => {
    await serve?.stop();
    serve = undefined;
  });

  it("is not a keepalive comment every millisecond: a 1 s prefill carries at most a few", async () => {
    serve = await serveProcess(["--db", ":memory:", "--keepalive-ms", "0", "--quiet"]).catch(
      (err: Error) => {
        // Refusing 0 as a value out of range (exit 2, one line) is as good as honouring it.
        expect(err.message).toMatch(/exited with 2: gateway: --keepalive-ms .*\n?$/);
        return undefined;
      },
    );
    if (!serve) return;
    const res = await post(
      serve,
      "/v1/chat/completions",
      chat("[[mock:delay=1000]] hello", "mock-gpt", { stream: true }),
      { authorization: `Bearer ${serve.ready.demo_key}` },
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain("data: [DONE]");
    const comments = text.split("\n").filter((line) => line.startsWith(":"));
    expect(comments.length).toBeLessThanOrEqual(5);
  }, 30_000);
});

describe("the approval page on a phone", () => {
  it.skipIf(!haveChromium)(
    "fits 390 px with any client name the device endpoint accepts (a long one without spaces wraps)",
    async () => {
      const gw: TestGateway = await testGateway();
      cleanups.push(() => gw.close());
      // The endpoint takes up to 100 characters from any tool; an application id has no spaces.
      const clientName = "com.example.continuousintegration.buildagent.production";
      const code = (await (
        await post(gw, "/api/auth/device/code", { client_name: clientName }, {})
      ).json()) as { verification_uri_complete: string };
      const browser = await connectChromium();
      cleanups.push(() => browser.close());
      const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
      const page = await context.newPage();
      page.setDefaultTimeout(10_000);
      const errors: string[] = [];
      page.on("pageerror", (err) => errors.push(err.message));
      await page.goto(await createOwnerLink(gw.services.repos.sessions, "acct", gw.url));
      await page.goto(code.verification_uri_complete);
      await page.locator("#user-code").waitFor();
      expect(await page.locator("bdi").first().textContent()).toBe(clientName);
      if (process.env.HUNT_SHOTS)
        await page.screenshot({
          path: join(process.env.HUNT_SHOTS, "approval-phone-long-client-name.png"),
        });
      expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
      expect(errors).toEqual([]);
    },
    40_000,
  );
});

describe("the manual clock moved past the last date JavaScript can hold", () => {
  it("is refused with a 400 and nothing moves: free requests keep answering", async () => {
    const gw = await startGateway({
      config: baseConfig(),
      clock: "manual",
      now: () => Date.parse("2030-01-01T00:00:00Z"),
    });
    cleanups.push(() => gw.close());
    const before = gw.clock.now();
    // Within the route's own bound (Number.MAX_SAFE_INTEGER), past Date's (8.64e15 ms).
    const res = await post(
      gw,
      "/api/admin/clock",
      { advance_ms: Number.MAX_SAFE_INTEGER - 2e12 },
      { authorization: `Bearer ${ADMIN_KEY}` },
    );
    expect(res.status).toBe(400);
    expect(gw.clock.now()).toBe(before);
    expect(() => gw.clock.advance(8.64e15)).toThrow(RangeError);
    expect(gw.clock.now()).toBe(before);
    const free = await post(gw, "/v1/chat/completions", chat("hello", "mock-gpt:free"));
    expect(free.status).toBe(200);
  });
});

describe("a provider's 401 on demand", () => {
  it("a scripted 401 (rule or [[mock:fail=401]]) answers as a live provider's 401 does: 503 upstream_error", async () => {
    const upstream = await fakeUpstream("openai", () =>
      openaiError(401, "Incorrect API key provided.", "invalid_api_key"),
    );
    cleanups.push(() => upstream.close());
    const gw = await startGateway({
      config: baseConfigWith({
        providers: [
          { id: "oa", wire: "openai", base_url: upstream.url, api_keys: ["sk-hunt-401"] },
        ],
        models: [{ name: "live", provider: "oa", price_input_per_mtok: 1000 }],
      }),
    });
    cleanups.push(() => gw.close());
    const answer = async (res: Response) => ({
      status: res.status,
      code: ((await res.json()) as { error: { code: string } }).error.code,
    });
    // The real thing (DECISIONS.md: an upstream 401 is a provider failure, 503 upstream_error).
    const live = await answer(await post(gw, "/v1/chat/completions", chat("hello", "live")));
    expect(live).toEqual({ status: 503, code: "upstream_error" });
    gw.mock.reply({ user_text: "scripted" }, { error: { status: 401 } }, { times: 1 });
    expect(await answer(await post(gw, "/v1/chat/completions", chat("scripted")))).toEqual(live);
    expect(
      await answer(await post(gw, "/v1/chat/completions", chat("[[mock:fail=401]] hello"))),
    ).toEqual(live);
  });
});

describe("gateway keys list and a label a tool chose", () => {
  it("prints a label's control and bidi characters as U+FFFD, never as terminal escapes", async () => {
    const gw = await testGateway();
    cleanups.push(() => gw.close());
    // Any holder of the login key (a tool) may label the keys it mints; the owner lists them.
    const label = "ci\x1b]0;owned\x07\x1b[31mred\u202Etxt.exe";
    const created = await post(
      gw,
      "/api/keys",
      { label },
      { authorization: `Bearer ${LOGIN_KEY}` },
    );
    expect(created.status).toBe(201);
    const home = cliHome({ GATEWAY_API_KEY: LOGIN_KEY, GATEWAY_BASE_URL: gw.url });
    cleanups.push(() => home.remove());
    const listed = await runCli(["keys", "list"], home.env);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain("ci");
    // As security.md has it for the client name a login key is labelled with.
    expect(listed.stdout.replaceAll("\n", "")).not.toMatch(/[\p{Cc}\p{Cf}]/u);
    expect(listed.stdout).toContain("\uFFFD");
  });
});
