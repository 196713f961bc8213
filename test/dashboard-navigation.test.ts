import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createOwnerLink } from "../src/server/auth/owner-session.js";
import {
  connectChromium,
  haveChromium,
  newTab,
  shoot,
  signedInTab,
  signIn,
} from "./support/browser.js";
import { ownerSession } from "./support/cli.js";
import { baseConfigWith, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Getting around the dashboard: by keyboard past the usage charts, from the login approval pages
 * and from a mistyped address back to the dashboard, and back to a form, filled in as it was,
 * after the session ended while it was being typed. In Chromium at a desktop's and a phone's width, and over HTTP for what a
 * browser cannot show (cookies, cross-origin posts). Set DASHBOARD_SCREENSHOTS=<dir> to keep
 * screenshots.
 */

let gw: TestGateway;
let browser: Browser | undefined;

beforeAll(async () => {
  gw = await testGateway({
    config: baseConfigWith({
      providers: [{ id: "openai", wire: "openai", base_url: "http://127.0.0.1:9/v1" }],
    }),
  });
  await post(gw, "/v1/chat/completions", chat("hello"));
  await post(gw, "/v1/chat/completions", chat("again"));
  if (haveChromium) browser = await connectChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});

/** The focused element as a person would name it: its label, or its text. */
const focusedName = (page: Page) =>
  page.evaluate(`(() => {
    const el = document.activeElement;
    const name = el.getAttribute("aria-label") || el.textContent || el.getAttribute("name") || "";
    return el.tagName.toLowerCase() + " " + name.replace(/\\s+/g, " ").trim().slice(0, 40);
  })()`) as Promise<string>;

/** The names of the next Tab stops, up to the first whose name contains `until` (at most `max`). */
async function tabStops(page: Page, until: string, max: number): Promise<string[]> {
  const stops: string[] = [];
  for (let i = 0; i < max; i++) {
    await page.keyboard.press("Tab");
    stops.push(await focusedName(page));
    if (stops[i].includes(until)) break;
  }
  return stops;
}

async function deviceCode(clientName: string): Promise<{ user_code: string; uri: string }> {
  const res = await post(gw, "/api/auth/device/code", { client_name: clientName }, {});
  const body = (await res.json()) as { user_code: string; verification_uri_complete: string };
  return { user_code: body.user_code, uri: body.verification_uri_complete };
}

const keyLabels = () => gw.services.store.listKeys("acct").map((k) => k.label);

describe.skipIf(!haveChromium)("the usage charts by keyboard", () => {
  it.each([1280, 390])(
    "at %i px the next Tab after the navigation is the values table, not the charts' 60 bars; the mouse still reads a bar",
    async (width) => {
      const { context, page, errors } = await signedInTab(browser!, gw, width);
      try {
        await page.getByRole("button", { name: "Sign out" }).focus();
        expect(await tabStops(page, "Values per day", 80)).toEqual(["summary Values per day"]);
        expect(await page.locator("figure.chart [tabindex]").count()).toBe(0);
        await shoot(page, `charts-keyboard-${width}`);
        await page.keyboard.press("Enter");
        const today = gw.services.store.usageDaily("acct", 0).at(-1)!.date;
        await page.locator("#daily-values tbody tr", { hasText: today }).waitFor();

        // Each chart is one image whose name says what it shows, where its values are.
        const chart = page.getByRole("img", { name: /^Requests per day/ });
        expect(await chart.getAttribute("aria-label")).toBe(
          `Requests per day, last 30 days: 2 requests in all, peak 2 requests on ${today}. Each day's values are in the table Values per day.`,
        );
        await page.locator("#chart-requests svg rect").last().hover();
        expect((await page.locator("#chart-requests .readout").textContent())?.trim()).toBe(
          `${today}: 2 requests`,
        );
        await shoot(page, `charts-hover-${width}`, { selector: ".charts" });
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    },
    30_000,
  );
});

describe.skipIf(!haveChromium)("the login approval pages' way back to the dashboard", () => {
  it.each([1280, 390])(
    "at %i px the code form and the approval page carry the dashboard's navigation, and Approve still approves",
    async (width) => {
      const { context, page } = await signedInTab(browser!, gw, width, {
        next: "/dashboard/device",
      });
      try {
        const nav = page.getByRole("navigation");
        expect(await nav.getByRole("link").allTextContents()).toEqual([
          "Dashboard",
          "Approve a login",
        ]);
        expect(
          await nav.getByRole("link", { name: "Approve a login" }).getAttribute("aria-current"),
        ).toBe("page");
        expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
          width,
        );
        await shoot(page, `device-code-form-${width}`);

        const dc = await deviceCode(`nav test ${width}`);
        await page.goto(dc.uri);
        expect((await page.locator("#user-code").textContent())?.trim()).toBe(dc.user_code);
        expect(await page.content()).not.toContain("<script");
        expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
          width,
        );
        await shoot(page, `approval-nav-${width}`);
        // By keyboard: the navigation, then the decision, Approve first.
        await page.locator("body").focus();
        expect(await tabStops(page, "Deny", 8)).toEqual([
          "a Dashboard",
          "a Approve a login",
          "button Sign out",
          "button Approve",
          "button Deny",
        ]);
        await page.getByRole("link", { name: "Dashboard" }).click();
        await page.locator("#balance").waitFor();

        await page.goBack();
        await page.getByRole("button", { name: "Approve" }).click();
        await page.getByRole("heading", { name: "Login approved" }).waitFor();
        await shoot(page, `approved-nav-${width}`);
        await page.getByRole("link", { name: "Go to the dashboard" }).click();
        await page.locator("#balance").waitFor();
      } finally {
        await context.close();
      }
    },
    30_000,
  );
});

describe.skipIf(!haveChromium)("a mistyped dashboard address", () => {
  it.each([1280, 390])(
    "at %i px is the dashboard's 404 page, naming the address (however long) and leading back to the dashboard; signed out, to the sign-in",
    async (width) => {
      const { context, page, errors } = await signedInTab(browser!, gw, width);
      const signedOut = await newTab(browser!, width);
      try {
        const long = `/dashboard/${"keysandsettings".repeat(8)}`;
        for (const [path, name] of [
          ["/dashboard/setings", "page-not-found"],
          [long, "page-not-found-long"],
        ] as const) {
          const res = await page.goto(`${gw.url}${path}`);
          expect(res?.status()).toBe(404);
          await page.getByRole("heading", { name: "Page not found" }).waitFor();
          expect(await page.locator("main").textContent()).toContain(path);
          expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
            width,
          );
          await shoot(page, `${name}-${width}`);
        }
        await page.getByRole("link", { name: "Go to the dashboard" }).click();
        await page.locator("#balance").waitFor();
        expect(new URL(page.url()).pathname).toBe("/dashboard");
        // Chromium logs the 404 of the navigation itself; the page logs and throws nothing.
        expect(errors.filter((e) => !e.includes("status of 404"))).toEqual([]);

        const res = await signedOut.page.goto(`${gw.url}/dashboard/setings`);
        expect(res?.status()).toBe(404);
        await signedOut.page.getByRole("link", { name: "Go to the dashboard" }).click();
        await signedOut.page
          .getByRole("heading", { name: "Sign in to the gateway dashboard" })
          .waitFor();
      } finally {
        await context.close();
        await signedOut.context.close();
      }
    },
    30_000,
  );
});

describe.skipIf(!haveChromium)("a form sent after the session ended", () => {
  it.each([1280, 390])(
    "at %i px the new key's typed label and its shared box survive signing in again; nothing is created until it is sent again",
    async (width) => {
      const label = `phone build ${width}`;
      const { context, page } = await signedInTab(browser!, gw, width);
      try {
        await page.getByLabel("New key label").fill(label);
        await page.getByLabel("shared", { exact: true }).check();
        // The session ends while the form is open (its cookie lasts as long as the session).
        await context.clearCookies({ name: "gateway_session" });
        await page.getByRole("button", { name: "Create key" }).click();
        await page.getByRole("heading", { name: "Sign in to the gateway dashboard" }).waitFor();
        await page.getByText("The form was not sent").waitFor();
        expect(keyLabels()).not.toContain(label);
        await shoot(page, `draft-sign-in-${width}`);

        // `gateway dashboard` opens a plain owner link: it leads back to the form, filled in.
        await signIn(page, gw);
        const input = page.getByLabel("New key label");
        expect(await input.inputValue()).toBe(label);
        expect(await page.getByLabel("shared", { exact: true }).isChecked()).toBe(true);
        expect(await focusedName(page)).toBe("input label");
        await page.getByText("check it and send it again").waitFor();
        expect(keyLabels()).not.toContain(label);
        // `-top`: the screen as it opens, scrolled to the form.
        await shoot(page, `draft-refilled-${width}`, { screens: true });

        await page.getByRole("button", { name: "Create key" }).click();
        await page.locator("#new-key-value").waitFor();
        const created = gw.services.store.listKeys("acct").find((k) => k.label === label);
        expect(created).toMatchObject({ kind: "shared" });
        // Shown once: the next view of the dashboard has an empty form.
        await page.reload();
        expect(await page.getByLabel("New key label").inputValue()).toBe("");
        expect(await page.getByLabel("shared", { exact: true }).isChecked()).toBe(false);
      } finally {
        await context.close();
      }
    },
    30_000,
  );

  it("an approval sent after the session ended leads back to that login's approval page", async () => {
    const dc = await deviceCode("expired session");
    const { context, page } = await signedInTab(browser!, gw, 390, {
      next: `/dashboard/device?user_code=${dc.user_code}`,
    });
    try {
      await context.clearCookies({ name: "gateway_session" });
      await page.getByRole("button", { name: "Approve" }).click();
      await page.getByRole("heading", { name: "Sign in to the gateway dashboard" }).waitFor();
      await page.goto(await createOwnerLink(gw.services.repos.sessions, "acct", gw.url));
      expect(page.url()).toBe(`${gw.url}/dashboard/device?user_code=${dc.user_code}`);
      await page.getByRole("button", { name: "Approve" }).click();
      await page.getByRole("heading", { name: "Login approved" }).waitFor();
    } finally {
      await context.close();
    }
  }, 30_000);
});

/** A browser's cookies, as the answers' Set-Cookie lines leave them. */
class CookieJar {
  private readonly cookies = new Map<string, string>();

  keep(setCookies: string[]): void {
    for (const line of setCookies) {
      const pair = line.split(";")[0];
      const name = pair.slice(0, pair.indexOf("="));
      if (/;\s*max-age=0/i.test(line)) this.cookies.delete(name);
      else this.cookies.set(name, pair);
    }
  }

  header(): string[] {
    return [...this.cookies.values()];
  }
}

/** A form posted without a session, as a browser on a page of `origin` sends it. */
async function postSignedOut(
  jar: CookieJar,
  path: string,
  fields: Record<string, string>,
  origin = gw.url,
) {
  const res = await fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      origin,
      cookie: jar.header().join("; "),
    },
    body: new URLSearchParams(fields).toString(),
    redirect: "manual",
  });
  const setCookies = res.headers.getSetCookie();
  jar.keep(setCookies);
  return { status: res.status, html: await res.text(), setCookies };
}

/** The dashboard as the browser of `jar` sees it once signed in again. */
async function dashboardWith(jar: CookieJar): Promise<string> {
  const owner = await ownerSession(gw);
  const res = await fetch(`${gw.url}/dashboard`, {
    headers: { cookie: [owner.cookie, ...jar.header()].join("; ") },
  });
  expect(res.status).toBe(200);
  return res.text();
}

describe("what a signed-out form keeps", () => {
  it("a provider key form keeps its provider and label, never the key, and adds nothing", async () => {
    const secret = "sk-typed-while-signed-out-9z9z";
    const before = gw.services.store.listByok("acct").length;
    const jar = new CookieJar();
    const sent = await postSignedOut(jar, "/dashboard/byok", {
      provider: "openai",
      label: "team <openai>",
      key: secret,
      csrf_token: "from-the-ended-session",
    });
    expect(sent.status).toBe(401);
    expect(sent.html).toContain("The form was not sent");
    expect(sent.html).toContain("but for the provider key: it is never kept");
    expect(sent.html).not.toContain(secret);
    const cookies = sent.setCookies.join("\n");
    expect(cookies).not.toContain(secret);
    expect(cookies).not.toContain(Buffer.from(secret).toString("base64url").slice(0, 12));

    const html = await dashboardWith(jar);
    expect(html).not.toContain(secret);
    expect(html).toContain('value="team &lt;openai&gt;"');
    expect(html).toContain('<option value="openai" selected>openai</option>');
    expect(html).toContain("Type the provider key again");
    expect(gw.services.store.listByok("acct").length).toBe(before);
  });

  it("a post from another site keeps nothing, and a later form that keeps nothing drops an earlier one", async () => {
    const jar = new CookieJar();
    const crossSite = await postSignedOut(
      jar,
      "/dashboard/keys",
      { label: "planted by another site", csrf_token: "x" },
      "https://evil.example",
    );
    expect(crossSite.status).toBe(401);
    expect(crossSite.setCookies).toEqual([]);
    expect(await dashboardWith(jar)).not.toContain("planted by another site");

    await postSignedOut(jar, "/dashboard/keys", { label: "first form", csrf_token: "x" });
    await postSignedOut(jar, "/dashboard/keys/k2/revoke", { csrf_token: "x" });
    expect(await dashboardWith(jar)).not.toContain("first form");
    expect(gw.services.store.getKey("k2")!.revoked_at).toBeNull();
  });
});
