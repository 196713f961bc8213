import { existsSync, readFileSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createOwnerLink } from "../src/server/auth/owner-session.js";
import { type CliHome, cliHome, killRunningClis, loginPrompt, spawnCli } from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/** Once in a real browser: Debian's chromium, headless, driven by playwright-core. */

const chromiumPath = "/usr/bin/chromium";
const haveChromium = existsSync(chromiumPath);
if (!haveChromium)
  console.warn(`browser-login: skipped, ${chromiumPath} is missing (apt-get install chromium)`);

let gw: TestGateway;
let browser: Browser | undefined;
let home: CliHome | undefined;

beforeAll(async () => {
  gw = await testGateway({ devicePollIntervalSeconds: 1 });
  if (haveChromium) {
    browser = await chromium.launch({
      executablePath: chromiumPath,
      timeout: 15_000,
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
      ],
    });
  }
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

  it("a browser without a session is told to run gateway owner-link, and the link leads back to the approval page", async () => {
    const res = await post(gw, "/api/auth/device/code", { client_name: "browser test" }, {});
    const dc = (await res.json()) as { verification_uri_complete: string; user_code: string };
    const context = await browser!.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(10_000);
      await page.goto(dc.verification_uri_complete);
      await page.getByRole("heading", { name: "Sign in to the gateway dashboard" }).waitFor();
      expect(await page.locator("pre.cmd").textContent()).toBe("npx gateway owner-link");
      await page.goto(await createOwnerLink(gw.services.repos.sessions, "acct", gw.url));
      expect(page.url()).toBe(dc.verification_uri_complete);
      expect((await page.locator("#user-code").textContent())?.trim()).toBe(dc.user_code);
    } finally {
      await context.close();
    }
  }, 30_000);
});
