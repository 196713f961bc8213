import { Agent, fetch as undiciFetch } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  maxCodesPerAddressPerMinute,
  maxPendingCodesPerAddress,
} from "../src/server/auth/device-codes.js";
import {
  approvalPage,
  type CliHome,
  cliHome,
  dashboardCsrf,
  decide,
  killRunningClis,
  loginPrompt,
  ownerDecides,
  ownerSession,
  spawnCli,
} from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * One client address cannot spend everyone's room for `gateway login`: code requests are limited
 * per address (pending codes and a per-minute rate), and user codes cannot be guessed on the
 * approval form. Before the limits, 200 requests from one address blocked every login for the
 * code lifetime. Loopback accepts all of 127/8 on Linux, so each address is a local socket.
 */

let gw: TestGateway;
const agents: Agent[] = [];
const homes: CliHome[] = [];

beforeAll(async () => {
  gw = await testGateway({ devicePollIntervalSeconds: 1 });
});
afterAll(async () => {
  await Promise.all(agents.map((a) => a.close()));
  await gw?.close();
});
afterEach(() => {
  killRunningClis();
  for (const home of homes.splice(0)) home.remove();
});

function from(address: string, gateway: { url: string } = gw) {
  const agent = new Agent({ localAddress: address });
  agents.push(agent);
  return async (clientName = "flood") => {
    const res = await undiciFetch(`${gateway.url}/api/auth/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ client_name: clientName }),
      dispatcher: agent,
    });
    const body = (await res.json()) as Record<string, string>;
    return { status: res.status, body, retryAfter: res.headers.get("retry-after") };
  };
}

/**
 * `count` requests of `ask`, 25 at a time: one at a time, the 450 of the flood below outlasted
 * the test's time on a loaded machine; 25 stay far under the per-address connection cap.
 */
async function flooding(ask: () => ReturnType<ReturnType<typeof from>>, count: number) {
  const answers = [];
  for (let sent = 0; sent < count; sent += 25) {
    const batch = Array.from({ length: Math.min(25, count - sent) }, () => ask());
    answers.push(...(await Promise.all(batch)));
  }
  return answers;
}

describe("device-code requests per client address", () => {
  it("a flood from one address stops at its pending cap while another address logs in", async () => {
    const answers = await flooding(from("127.0.0.2"), 250);
    const issued = answers.filter((a) => a.status === 200);
    expect(issued).toHaveLength(maxPendingCodesPerAddress);
    const refused = answers.filter((a) => a.status === 429);
    expect(refused).toHaveLength(250 - maxPendingCodesPerAddress);
    expect(refused[0].body).toEqual({
      error: "slow_down",
      error_description: expect.stringContaining(
        `${maxPendingCodesPerAddress} login requests waiting`,
      ),
    });
    expect(Number(refused[0].retryAfter)).toBeGreaterThan(0);

    // A few more flooding addresses, each past its own cap, do not reach the global cap either.
    const others = await Promise.all(
      Array.from({ length: 10 }, (_, n) =>
        flooding(from(`127.0.0.${n + 3}`), maxPendingCodesPerAddress + 1),
      ),
    );
    for (const answered of others)
      expect(answered.map((answer) => answer.status).sort()).toEqual([
        ...Array(maxPendingCodesPerAddress).fill(200),
        429,
      ]);

    // The real CLI, from 127.0.0.1, still logs in.
    const home = cliHome();
    homes.push(home);
    const cli = spawnCli(["login", "--no-browser", "--base-url", gw.url], home.env);
    const { userCode } = await loginPrompt(cli);
    expect((await ownerDecides(gw, userCode, "approve")).status).toBe(200);
    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(done.stdout).toMatch(/Logged in to .* as account acct/);
  });

  it("limits how many codes one address asks for per minute, even when each is finished", async () => {
    const ask = from("127.0.0.20");
    const owner = await ownerSession(gw);
    let issued = 0;
    for (;;) {
      const answer = await ask();
      if (answer.status !== 200) {
        expect(answer.status).toBe(429);
        expect(answer.body.error).toBe("slow_down");
        expect(answer.body.error_description).toContain(
          `at most ${maxCodesPerAddressPerMinute} a minute`,
        );
        expect(Number(answer.retryAfter)).toBeGreaterThan(0);
        break;
      }
      issued++;
      // Deny each at once, so the pending cap is never what refuses.
      const page = await approvalPage(gw, owner, answer.body.user_code);
      const denied = await decide(
        gw,
        "deny",
        { user_code: answer.body.user_code, csrf_token: page.csrf! },
        { cookie: owner.cookie, origin: gw.url },
      );
      expect(denied.status).toBe(200);
    }
    // A minute boundary may fall inside the loop; then the count starts again once.
    expect(issued).toBeGreaterThanOrEqual(maxCodesPerAddressPerMinute);
    expect(issued).toBeLessThanOrEqual(2 * maxCodesPerAddressPerMinute);
  });

  it("the CLI shows the refusal in one readable line", async () => {
    // An address of its own at its pending cap, whichever test ran before.
    const flooded = from("127.0.0.40");
    for (let i = 0; i < maxPendingCodesPerAddress; i++) expect((await flooded()).status).toBe(200);
    expect((await flooded()).status).toBe(429);
    // The CLI has no --local-address; its own client shows the same answer when it gets one.
    const { GatewayClient } = await import("../src/cli/api-client.js");
    const agent = new Agent({ localAddress: "127.0.0.40" });
    agents.push(agent);
    const client = new GatewayClient({
      baseUrl: gw.url,
      fetch: ((input: string, init: RequestInit) =>
        undiciFetch(input, { ...(init as object), dispatcher: agent })) as unknown as typeof fetch,
    });
    await expect(client.requestDeviceCode("cli")).rejects.toThrow(
      /rate limiting this \(429 slow_down\): Your address already has \d+ login requests waiting/,
    );
  });
});

describe("user codes on the approval form", () => {
  // Wrong codes are counted per minute: on a held clock no minute ends between the twelfth and
  // the checks after it, as one could on the wall clock.
  let held: TestGateway;
  beforeAll(async () => {
    held = await testGateway({ clock: "manual", now: () => Date.parse("2030-01-01T10:00:00Z") });
  });
  afterAll(async () => {
    await held?.close();
  });

  it("a session entering too many wrong codes gets a 429 page; another session does not", async () => {
    const gw = held;
    const owner = await ownerSession(gw);
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const wrong = `BCDF-${"GHJKLMNPQRST"[i]}BBB`;
      statuses.push((await approvalPage(gw, owner, wrong)).status);
    }
    expect(statuses.slice(0, 10).every((s) => s === 404)).toBe(true);
    expect(statuses.slice(10)).toEqual([429, 429]);

    // Even a real code is refused to this session for now, and the form post too.
    const real = from("127.0.0.30", gw);
    const code = (await real("real")).body.user_code;
    const blocked = await approvalPage(gw, owner, code);
    expect(blocked.status).toBe(429);
    expect(blocked.html).toContain("Too many wrong codes");
    const other = await ownerSession(gw);
    const page = await approvalPage(gw, other, code);
    expect(page.status).toBe(200);
    const posted = await decide(
      gw,
      "approve",
      { user_code: code, csrf_token: page.csrf! },
      { cookie: owner.cookie, origin: gw.url },
    );
    expect(posted.status).toBe(403);
    // The blocked session's post was refused by its CSRF token (another session's); with its own:
    const own = await dashboardCsrf(gw, owner);
    const refused = await decide(
      gw,
      "approve",
      { user_code: code, csrf_token: own },
      { cookie: owner.cookie, origin: gw.url },
    );
    expect(refused.status).toBe(429);
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });
});
