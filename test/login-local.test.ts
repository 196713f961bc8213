import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { runDashboard } from "../src/cli/dashboard.js";
import { UserError } from "../src/cli/errors.js";
import { localOwnerLink, sameServer } from "../src/cli/local-serve.js";
import { runLogin, signedInApproval } from "../src/cli/login.js";
import {
  type CliHome,
  cliHome,
  killRunningClis,
  ownerDecides,
  runCli,
  spawnCli,
} from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";
import { fakeBrowser, loginContext, memoryStores } from "./support/login.js";

/**
 * `gateway login` on the machine that runs the gateway opens the approval page already signed in,
 * and `gateway dashboard` opens the dashboard signed in: both mint a one-time owner link from the
 * serve's database file. Driven in-process through the flows' contexts, and as the CLI.
 */

let gw: TestGateway;
let home: CliHome | undefined;

beforeAll(async () => {
  gw = await testGateway({ devicePollIntervalSeconds: 1 });
});
afterAll(() => gw.close());
afterEach(() => {
  killRunningClis();
  home?.remove();
  home = undefined;
});

/** A browser with no dashboard session: on the approval page it presses Approve, if it got there. */
const signedOutBrowser = () => fakeBrowser({ press: "approve" });

function localLogin(
  browser: ReturnType<typeof fakeBrowser>,
  signedInUrl?: (url: string) => Promise<string | undefined>,
) {
  const { store, stores } = memoryStores();
  // The browser approved before the first poll: no wait is needed.
  const { ctx } = loginContext(gw.url, {
    stores,
    openBrowser: (url) => browser.open(url),
    signedInUrl,
  });
  return { store, ctx };
}

describe("gateway login on the gateway's machine", () => {
  it("opens the approval page signed in: one click approves and the login key works", async () => {
    const browser = signedOutBrowser();
    const { ctx, store } = localLogin(browser, signedInApproval(gw.dbPath, gw.url, true));
    const outcome = await runLogin(ctx, { profile: "default", browser: true });

    expect(outcome.accountId).toBe("acct");
    const [link, approval, approved] = browser.visits;
    expect(link).toMatchObject({ status: 303 });
    expect(new URL(link.url).pathname).toBe("/dashboard/login");
    expect(approval.status).toBe(200);
    expect(new URL(approval.url).pathname).toBe("/dashboard/device");
    expect(approval.html).toContain('id="user-code"');
    expect(approval.html).not.toContain("Sign in to the gateway dashboard");
    expect(approved).toMatchObject({ status: 200 });
    expect(approved.html).toContain("Login approved");
    const key = store.saved.get("default")!.key;
    const res = await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
  });

  it("elsewhere (no serve on the database, or another gateway) the page asks for a sign-in as before", async () => {
    const other = await testGateway();
    try {
      // The database is another gateway's: its link would not open this gateway's dashboard.
      const browser = signedOutBrowser();
      const { ctx } = localLogin(browser, signedInApproval(other.dbPath, gw.url, false));
      const login = runLogin(ctx, { profile: "default", browser: true });
      // The signed-out browser lands on the sign-in page and cannot approve: cancel via the API.
      await expect.poll(() => browser.visits.length).toBeGreaterThan(0);
      expect(browser.visits[0].status).toBe(401);
      expect(new URL(browser.visits[0].url).pathname).toBe("/dashboard/device");
      expect(browser.visits[0].html).toContain("Sign in to the gateway dashboard");
      expect(browser.visits[0].html).toContain("gateway dashboard");
      const code = new URL(browser.visits[0].url).searchParams.get("user_code")!;
      const owner = await ownerDecides(gw, code, "deny");
      expect(owner.status).toBe(200);
      await expect(login).rejects.toThrow("login denied in the browser");
    } finally {
      await other.close();
    }
  });

  it("mints only for the gateway the login talks to", async () => {
    await expect(localOwnerLink(gw.dbPath, { forBaseUrl: "http://127.0.0.1:1" })).rejects.toThrow(
      UserError,
    );
    await expect(localOwnerLink(`${gw.dir}/missing.db`)).rejects.toThrow("no database at");
    const port = new URL(gw.url).port;
    expect(sameServer(gw.url, `http://localhost:${port}`)).toBe(true);
    expect(sameServer(gw.url, `http://127.0.0.1:${port}/`)).toBe(true);
    expect(sameServer(gw.url, `https://127.0.0.1:${port}`)).toBe(false);
    expect(sameServer(gw.url, `http://gateway.example.com:${port}`)).toBe(false);
    expect(sameServer(gw.url, `http://127.0.0.1:${Number(port) + 1}`)).toBe(false);
  });
});

describe("gateway dashboard", () => {
  it("opens a fresh one-time owner link that signs the browser in to the dashboard", async () => {
    const opened: string[] = [];
    const outcome = await runDashboard(
      { mint: (db) => localOwnerLink(db), openBrowser: async (url) => void opened.push(url) },
      { db: gw.dbPath, browser: true },
    );
    expect(outcome.opened).toBe(true);
    expect(opened).toEqual([outcome.url]);
    const res = await fetch(outcome.url, { redirect: "manual" });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/dashboard");
    expect(res.headers.get("set-cookie")).toMatch(/^gateway_session=/);
  });

  it("as the CLI: prints the link (JSON for scripts), each run a new one, spent once opened", async () => {
    home = cliHome();
    const first = await runCli(
      ["dashboard", "--no-browser", "--db", gw.dbPath, "--json"],
      home.env,
    );
    expect(first.code).toBe(0);
    const { owner_url, account_id, opened } = JSON.parse(first.stdout) as {
      owner_url: string;
      account_id: string;
      opened: boolean;
    };
    expect({ account_id, opened }).toEqual({ account_id: "acct", opened: false });
    expect(owner_url.startsWith(`${gw.url}/dashboard/login?token=`)).toBe(true);
    expect((await fetch(owner_url, { redirect: "manual" })).status).toBe(303);
    expect((await fetch(owner_url, { redirect: "manual" })).status).toBe(401);

    const second = await runCli(["dashboard", "--no-browser", "--db", gw.dbPath], home.env);
    expect(second.code).toBe(0);
    expect(second.stdout).toMatch(
      /^owner dashboard \(one-time link, opens a session\): http:\S+\n$/,
    );
    expect(second.stdout).not.toContain(owner_url);

    const missing = await runCli(
      ["dashboard", "--no-browser", "--db", `${gw.dir}/nope.db`],
      home.env,
    );
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe(
      `gateway: no database at ${gw.dir}/nope.db; run this where \`gateway serve\` runs, or pass --db\n`,
    );
  });

  it("as the CLI: `gateway login --db` prints the signed-in approval link", async () => {
    home = cliHome();
    const cli = spawnCli(
      ["login", "--no-browser", "--base-url", gw.url, "--db", gw.dbPath],
      home.env,
    );
    const [, url] = await cli.waitFor(/(http:\/\/\S+\/dashboard\/login\?token=\S+)/);
    const [, userCode] = await cli.waitFor(/shows this code: ([A-Z]{4}-[A-Z]{4})/);
    const next = new URL(url).searchParams.get("next")!;
    expect(next).toBe(`/dashboard/device?user_code=${userCode}`);
    const browser = signedOutBrowser();
    await browser.open(url);
    expect(browser.visits.at(-1)!.html).toContain("Login approved");
    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(done.stdout).toContain("Logged in");
  }, 30_000);
});
