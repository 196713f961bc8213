import { statSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GatewayClient } from "../src/cli/api-client.js";
import { FileCredentialStore } from "../src/cli/credentials/file-store.js";
import { openCredentialStores } from "../src/cli/credentials/index.js";
import { UserError } from "../src/cli/errors.js";
import { type LoginContext, runLogin } from "../src/cli/login.js";
import { approvalPage, ownerDecides, ownerSession } from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";
import { fakeBrowser, fakeKeychain, loginContext } from "./support/login.js";

/**
 * `gateway login` in-process through its LoginContext (as gh tests `auth login` with injected
 * IO), against a real gateway on 127.0.0.1: a browser that approves, denies or never opens, the
 * gateway's manual clock as the CLI's clock, a fake keychain and the real file fallback, and the
 * terminal captured. test/cli.test.ts runs the same command as a subprocess.
 */

const intervalSeconds = 5;
const ttlSeconds = 30;
const service = "model-gateway-test";

let gw: TestGateway;

beforeEach(async () => {
  gw = await testGateway({
    clock: "manual",
    devicePollIntervalSeconds: intervalSeconds,
    deviceCodeTtlSeconds: ttlSeconds,
  });
});
afterEach(() => gw.close());

/**
 * The CLI's clock is the gateway's: each wait of the flow moves both. `onWait` runs during the
 * nth wait (the owner acting meanwhile) and may return how far the clock really moved (a timer
 * that fired early).
 */
function sharedClock(
  onWait: (n: number, ms: number) => Promise<number | undefined> | number | undefined = () =>
    undefined,
) {
  const waits: number[] = [];
  return {
    waits,
    now: () => gw.clock.now(),
    sleep: async (ms: number) => {
      waits.push(ms);
      gw.clock.advance((await onWait(waits.length, ms)) ?? ms);
    },
  };
}

const credentialsFile = () => new FileCredentialStore(join(gw.dir, "config", "credentials.json"));

/** The URL the prompt printed, as a user would copy it. */
function printedUrl(stderr: string): string {
  const url = /signed in to the gateway dashboard:\n\n {2}(\S+)\n/.exec(stderr)?.[1];
  if (!url) throw new Error(`no URL in the prompt:\n${stderr}`);
  return url;
}

async function worksOnV1(key: string): Promise<number> {
  return (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${key}` }))
    .status;
}

describe("gateway login in-process", () => {
  it("approved in the browser: the code in the terminal is the code on the page, and the key lands in the keychain", async () => {
    const keychain = fakeKeychain();
    const file = credentialsFile();
    const stores = await openCredentialStores({
      env: {},
      file,
      keychain: { service, keyring: keychain.load },
    });
    const browser = fakeBrowser({ cookie: (await ownerSession(gw)).cookie, press: "approve" });
    const clock = sharedClock();
    const { ctx, stdout, stderr } = loginContext(gw.url, {
      stores,
      openBrowser: (url) => browser.open(url),
      ...clock,
    });

    const outcome = await runLogin(ctx, { profile: "default", browser: true });

    const url = printedUrl(stderr.text());
    expect(url).toMatch(new RegExp(`^${gw.url}/dashboard/device\\?user_code=[A-Z]{4}-[A-Z]{4}$`));
    expect(browser.visits[0].url).toBe(url);
    const code = new URL(url).searchParams.get("user_code")!;
    expect(stderr.text()).toContain(`and check that the page shows this code: ${code}\n`);
    expect(browser.shownCode()).toBe(code);
    expect(browser.visits.at(-1)!.html).toContain("Login approved");
    expect(stderr.text()).toContain(
      `Waiting for approval in the browser (code expires in 0:${ttlSeconds})...\n`,
    );
    expect(stderr.text()).not.toContain("Could not open a browser");
    // Approved before the first poll: one wait, at the gateway's interval.
    expect(clock.waits).toEqual([intervalSeconds * 1000]);

    const stored = JSON.parse(keychain.read(service, "default")!) as { key: string };
    expect(await file.get("default")).toBeUndefined();
    expect(stdout.text()).toBe(
      `Logged in to ${gw.url} as account acct (login key ${outcome.keyId}, ${stored.key.slice(0, 7)}...), stored in OS keychain (service "${service}").\n`,
    );
    expect(stdout.text() + stderr.text()).not.toContain(stored.key);
    expect(await worksOnV1(stored.key)).toBe(200);
  });

  it("no browser opens: the URL stays printed to open by hand, and approving there logs in", async () => {
    const file = credentialsFile();
    const clock = sharedClock(async (n) => {
      if (n !== 1) return undefined;
      // The user copies the printed URL into a browser where the owner is signed in.
      const owner = fakeBrowser({ cookie: (await ownerSession(gw)).cookie, press: "approve" });
      await owner.open(printedUrl(stderr.text()));
      return undefined;
    });
    const { ctx, stdout, stderr } = loginContext(gw.url, {
      stores: await openCredentialStores({ env: { GATEWAY_CREDENTIAL_STORE: "file" }, file }),
      // What `open` does where there is no display: refuse.
      openBrowser: async () => {
        throw new Error("no display");
      },
      ...clock,
    });

    await runLogin(ctx, { profile: "default", browser: true });

    expect(stderr.text()).toContain("Could not open a browser; open the URL above yourself.\n");
    expect(stdout.text()).toMatch(
      new RegExp(`^Logged in to ${gw.url} as account acct .*, stored in ${file.location}\\.\\n$`),
    );
    expect(statSync(file.path).mode & 0o777).toBe(0o600);
    expect(await worksOnV1((await file.get("default"))!.key)).toBe(200);
  });

  it("--no-browser: nothing is opened and no failure is reported, only the URL to open", async () => {
    const opened: string[] = [];
    const clock = sharedClock(async (n) => {
      if (n === 1) await ownerDecides(gw, codeIn(stderr.text()), "approve");
      return undefined;
    });
    const { ctx, stderr } = loginContext(gw.url, {
      openBrowser: async (url) => void opened.push(url),
      ...clock,
    });
    await runLogin(ctx, { profile: "default", browser: false });
    expect(opened).toEqual([]);
    expect(printedUrl(stderr.text())).toContain("/dashboard/device?user_code=");
    expect(stderr.text()).not.toContain("Could not open a browser");
  });

  it("denied in the browser: ends with the denial and stores nothing", async () => {
    const browser = fakeBrowser({ cookie: (await ownerSession(gw)).cookie, press: "deny" });
    const { ctx } = loginContext(gw.url, {
      stores: await openCredentialStores({
        env: { GATEWAY_CREDENTIAL_STORE: "file" },
        file: credentialsFile(),
      }),
      openBrowser: (url) => browser.open(url),
      ...sharedClock(),
    });
    const login = runLogin(ctx, { profile: "default", browser: true });
    await expect(login).rejects.toThrow(
      new UserError("login denied in the browser; no key was created"),
    );
    expect(browser.visits.at(-1)!.html).toContain("Login denied");
    expect(() => statSync(credentialsFile().path)).toThrow();
  });

  it("never approved: polls at the interval until the gateway answers expired_token", async () => {
    const clock = sharedClock();
    const { ctx, stdout } = loginContext(gw.url, { ...clock });
    await expect(runLogin(ctx, { profile: "default", browser: false })).rejects.toThrow(
      "the code expired before it was approved; run `npx gateway login` again",
    );
    expect(clock.waits).toEqual(Array(ttlSeconds / intervalSeconds).fill(intervalSeconds * 1000));
    expect(stdout.text()).toBe("");
  });

  it("gives up at its own deadline when the gateway still says pending (the CLI's clock ran ahead)", async () => {
    const clock = sharedClock();
    let ahead = 0;
    const { ctx } = loginContext(gw.url, {
      ...clock,
      // The machine's clock is stepped forward while it waits; the gateway's is not.
      now: () => clock.now() + ahead,
      sleep: async (ms) => {
        await clock.sleep(ms);
        ahead = ttlSeconds * 1000;
      },
    });
    await expect(runLogin(ctx, { profile: "default", browser: false })).rejects.toThrow(
      "the code expired before it was approved",
    );
    expect(clock.waits).toEqual([intervalSeconds * 1000]);
  });

  it("slow_down: a poll that came early makes the CLI add 5 s to its interval for good", async () => {
    const clock = sharedClock(async (n, ms) => {
      // The second timer fires early: the gateway sees a poll 1 s after the last one.
      if (n === 2) return 1_000;
      if (n === 3) await ownerDecides(gw, codeIn(stderr.text()), "approve");
      return ms;
    });
    const { ctx, stderr } = loginContext(gw.url, { ...clock });
    await runLogin(ctx, { profile: "default", browser: false });
    const slower = (intervalSeconds + 5) * 1000;
    expect(clock.waits).toEqual([intervalSeconds * 1000, intervalSeconds * 1000, slower]);
    const announced = stderr.text().split("The gateway asked to poll slower").length - 1;
    expect(announced).toBe(1);
    expect(stderr.text()).toContain(`every ${intervalSeconds + 5} s now.\n`);
  });

  it("a gateway unreachable for a poll or two does not end the login; three polls in a row do", async () => {
    let unreachableFor = 0;
    const restarting: typeof fetch = (input, init) =>
      unreachableFor-- > 0 ? Promise.reject(new TypeError("fetch failed")) : fetch(input, init);
    const client = new GatewayClient({ baseUrl: gw.url, fetch: restarting });

    const briefly = sharedClock(async (n) => {
      if (n === 1) unreachableFor = 2;
      if (n === 3) await ownerDecides(gw, codeIn(first.stderr.text()), "approve");
      return undefined;
    });
    const first = loginContext(gw.url, { client, ...briefly });
    await runLogin(first.ctx, { profile: "default", browser: false });
    expect(briefly.waits).toHaveLength(3);

    const gone = sharedClock((n) => {
      if (n === 1) unreachableFor = 3;
      return undefined;
    });
    const second = loginContext(gw.url, { client, ...gone });
    await expect(runLogin(second.ctx, { profile: "default", browser: false })).rejects.toThrow(
      `cannot reach the gateway at ${gw.url}`,
    );
    expect(gone.waits).toHaveLength(3);
  });

  it("Ctrl-C: the code is cancelled on the gateway and the login ends with exit code 130", async () => {
    let pressCtrlC = () => false;
    const clock = sharedClock((n) => {
      if (n === 1) expect(pressCtrlC()).toBe(true);
      return undefined;
    });
    const started = loginContext(gw.url, { ...clock });
    pressCtrlC = started.interrupt;
    const ended = await runLogin(started.ctx, { profile: "default", browser: false }).catch(
      (e: unknown) => e,
    );
    expect(ended).toBeInstanceOf(UserError);
    expect(ended).toMatchObject({
      message: "login cancelled; the code can no longer be approved",
      exitCode: 130,
    });
    expect(started.listeningForInterrupt()).toBe(false);
    const page = await approvalPage(gw, await ownerSession(gw), codeIn(started.stderr.text()));
    expect(page.html).toContain("This login was cancelled");
    expect(page.csrf).toBeUndefined();
  });
});

describe("where the key is kept", () => {
  /** A login the owner approves during the first wait. */
  function approvedLogin(parts: Partial<LoginContext>) {
    const started = loginContext(gw.url, {
      ...sharedClock(async (n) => {
        if (n === 1) await ownerDecides(gw, codeIn(started.stderr.text()), "approve");
        return undefined;
      }),
      ...parts,
    });
    return started;
  }

  it("a keychain that does not answer: the timeout is announced and the key goes to the 0600 file", async () => {
    const file = credentialsFile();
    const stores = await openCredentialStores({
      env: {},
      file,
      keychain: { service, timeoutMs: 50, keyring: fakeKeychain(() => true).load },
    });
    const { ctx, stdout, stderr } = approvedLogin({ stores });
    await runLogin(ctx, { profile: "default", browser: false });
    expect(stderr.text()).toContain(
      `gateway: no OS keychain available (the keychain did not answer within 0.05 s); storing the key in ${file.location} (mode 0600)\n`,
    );
    expect(stdout.text()).toContain(`stored in ${file.location}.`);
    expect(statSync(file.path).mode & 0o777).toBe(0o600);
    expect(await worksOnV1((await file.get("default"))!.key)).toBe(200);
  });

  it("a keychain that passed its probe but does not take the key: announced, and the key goes to the file", async () => {
    const file = credentialsFile();
    // The probe's entry answers; the profile's entry waits on an unlock prompt nobody sees.
    const keychain = fakeKeychain((account) => account === "default");
    const stores = await openCredentialStores({
      env: {},
      file,
      keychain: { service, timeoutMs: 50, keyring: keychain.load },
    });
    expect(stores.primary.kind).toBe("keychain");
    const { ctx, stdout, stderr } = approvedLogin({ stores });
    await runLogin(ctx, { profile: "default", browser: false });
    expect(stderr.text()).toContain(
      `gateway: no OS keychain available (the keychain did not answer within 0.05 s); storing the key in ${file.location} (mode 0600)\n`,
    );
    expect(stdout.text()).toContain(`stored in ${file.location}.`);
    expect(await worksOnV1((await file.get("default"))!.key)).toBe(200);
  });

  it("GATEWAY_CREDENTIAL_STORE=keychain and the keychain fails the write: a clear error, and the key is revoked", async () => {
    const stores = await openCredentialStores({
      env: { GATEWAY_CREDENTIAL_STORE: "keychain" },
      file: credentialsFile(),
      keychain: {
        service,
        timeoutMs: 50,
        keyring: fakeKeychain((account) => account === "default").load,
      },
    });
    const { ctx } = approvedLogin({ stores });
    await expect(runLogin(ctx, { profile: "default", browser: false })).rejects.toThrow(
      new UserError(
        `could not store the login key in OS keychain (service "${service}") (the keychain did not answer within 0.05 s); it was revoked, run \`npx gateway login\` again`,
      ),
    );
    const minted = gw.services.store.listKeys("acct").filter((k) => k.label === "login test");
    expect(minted).toHaveLength(1);
    expect(minted[0].revoked_at).not.toBeNull();
    expect(() => statSync(credentialsFile().path)).toThrow();
  });

  it("a new login replaces the profile's previous one: the old key is revoked and leaves the file", async () => {
    const file = credentialsFile();
    const first = approvedLogin({
      stores: await openCredentialStores({ env: { GATEWAY_CREDENTIAL_STORE: "file" }, file }),
    });
    await runLogin(first.ctx, { profile: "default", browser: false });
    const oldKey = (await file.get("default"))!.key;

    const keychain = fakeKeychain();
    const second = approvedLogin({
      stores: await openCredentialStores({
        env: {},
        file,
        keychain: { service, keyring: keychain.load },
      }),
    });
    await runLogin(second.ctx, { profile: "default", browser: false });
    const newKey = (JSON.parse(keychain.read(service, "default")!) as { key: string }).key;
    expect(newKey).not.toBe(oldKey);
    expect(await file.get("default")).toBeUndefined();
    expect(await worksOnV1(oldKey)).toBe(401);
    expect(await worksOnV1(newKey)).toBe(200);
  });

  it("--json prints the outcome for scripts, and GATEWAY_API_KEY is said to take precedence", async () => {
    const file = credentialsFile();
    const { ctx, stdout, stderr } = approvedLogin({
      stores: await openCredentialStores({ env: { GATEWAY_CREDENTIAL_STORE: "file" }, file }),
      env: { GATEWAY_API_KEY: "kn-from-the-environment" },
    });
    const outcome = await runLogin(ctx, { profile: "default", browser: false, json: true });
    const key = (await file.get("default"))!.key;
    expect(JSON.parse(stdout.text())).toEqual({
      base_url: gw.url,
      account_id: "acct",
      key_id: outcome.keyId,
      prefix: key.slice(0, 7),
      stored_in: file.location,
    });
    expect(stderr.text()).toContain(
      "Note: GATEWAY_API_KEY is set and takes precedence over the stored key until you unset it.\n",
    );
  });
});

/** The user code the prompt printed. */
function codeIn(stderr: string): string {
  const code = /shows this code: ([A-Z]{4}-[A-Z]{4})/.exec(stderr)?.[1];
  if (!code) throw new Error(`no code in the prompt:\n${stderr}`);
  return code;
}
