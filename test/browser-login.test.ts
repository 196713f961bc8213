import { readFileSync } from "node:fs";
import type { Browser } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createOwnerLink } from "../src/server/auth/owner-session.js";
import { connectChromium, haveChromium, signIn } from "./support/browser.js";
import { type CliHome, cliHome, killRunningClis, loginPrompt, spawnCli } from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/** Once in a real browser: Debian's chromium, headless, driven by playwright-core. */

if (!haveChromium)
  console.warn("browser-login: skipped, /usr/bin/chromium is missing (apt-get install chromium)");

let gw: TestGateway;
let browser: Browser | undefined;
let home: CliHome | undefined;

beforeAll(async () => {
  gw = await testGateway({ devicePollIntervalSeconds: 1 });
  if (haveChromium) browser = await connectChromium();
});
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});
afterEach(() => {
  killRunningClis();
  home?.remove();
});

describe.skipIf(!haveChromium)("gateway login approved in a real browser", () => {
  it("shows the same code as the terminal, and Approve finishes the CLI with a working key", async () => {
    home = cliHome();
    const cli = spawnCli(["login", "--no-browser", "--base-url", gw.url], home.env);
    const { url, userCode } = await loginPrompt(cli);

    const context = await browser!.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(10_000);
      await page.goto(gw.ownerUrl!);
      expect(new URL(page.url()).pathname).toBe("/dashboard");
      const cookies = await context.cookies();
      expect(cookies.find((c) => c.name === "gateway_session")).toMatchObject({
        httpOnly: true,
        sameSite: "Strict",
      });

      await page.goto(url);
      expect((await page.locator("#user-code").textContent())?.trim()).toBe(userCode);
      await page.getByRole("button", { name: "Approve" }).click();
      await page.getByRole("heading", { name: "Login approved" }).waitFor();
    } finally {
      await context.close();
    }

    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(done.stdout).toContain("Logged in");
    const file = JSON.parse(readFileSync(home.credentialsPath, "utf8")) as {
      profiles: { default: { key: string } };
    };
    const key = file.profiles.default.key;
    expect(
      (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${key}` })).status,
    ).toBe(200);
  }, 30_000);

  it("shows a client name's bidi overrides as U+FFFD, so the page's text reads in its own order", async () => {
    const res = await post(
      gw,
      "/api/auth/device/code",
      { client_name: "evil\u202Egnp.exe\u2066x" },
      {},
    );
    const { user_code: userCode } = (await res.json()) as { user_code: string };
    const context = await browser!.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(10_000);
      await signIn(page, gw, { next: `/dashboard/device?user_code=${userCode}` });
      expect(await page.locator("strong bdi").innerText()).toBe("evil\uFFFDgnp.exe\uFFFDx");
      const text = await page.locator("main, body").first().innerText();
      expect(text).toContain(
        "A command-line login from evil\uFFFDgnp.exe\uFFFDx asks for a login key",
      );
      expect(text).not.toMatch(/[\u202A-\u202E\u2066-\u2069]/);
    } finally {
      await context.close();
    }
  });

  it("a browser without a session is told to run gateway dashboard, and an owner link leads back to the approval page", async () => {
    const res = await post(gw, "/api/auth/device/code", { client_name: "browser test" }, {});
    const dc = (await res.json()) as { verification_uri_complete: string; user_code: string };
    const context = await browser!.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(10_000);
      await page.goto(dc.verification_uri_complete);
      await page.getByRole("heading", { name: "Sign in to the gateway dashboard" }).waitFor();
      expect(await page.locator("pre.cmd").textContent()).toBe("npx gateway dashboard");
      await page.goto(await createOwnerLink(gw.services.repos.sessions, "acct", gw.url));
      expect(page.url()).toBe(dc.verification_uri_complete);
      expect((await page.locator("#user-code").textContent())?.trim()).toBe(dc.user_code);
    } finally {
      await context.close();
    }
  }, 30_000);

  it.each([
    [1280, 800],
    [390, 844],
  ])(
    "on the gateway's machine (%i px), login opens the approval page signed in: one click approves",
    async (width, height) => {
      home = cliHome();
      const cli = spawnCli(
        ["login", "--no-browser", "--base-url", gw.url, "--db", gw.dbPath],
        home.env,
      );
      const [, url] = await cli.waitFor(/(http:\/\/\S+\/dashboard\/login\?token=\S+)/);
      const [, userCode] = await cli.waitFor(/shows this code: ([A-Z]{4}-[A-Z]{4})/);
      // A fresh browser profile: no dashboard session at all.
      const context = await browser!.newContext({ viewport: { width, height } });
      try {
        const page = await context.newPage();
        page.setDefaultTimeout(10_000);
        await page.goto(url);
        expect(new URL(page.url()).pathname).toBe("/dashboard/device");
        expect((await page.locator("#user-code").textContent())?.trim()).toBe(userCode);
        expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
          width,
        );
        if (process.env.DASHBOARD_SCREENSHOTS) {
          await page.screenshot({
            path: `${process.env.DASHBOARD_SCREENSHOTS}/login-signed-in-${width}.png`,
            fullPage: true,
          });
        }
        await page.getByRole("button", { name: "Approve" }).click();
        await page.getByRole("heading", { name: "Login approved" }).waitFor();
        // The browser is now signed in: the dashboard opens without another link.
        await page.goto(`${gw.url}/dashboard`);
        await page.locator("#balance").waitFor();
      } finally {
        await context.close();
      }
      const done = await cli.exit();
      expect(done.code).toBe(0);
      expect(done.stdout).toContain("Logged in");
    },
    30_000,
  );
});
