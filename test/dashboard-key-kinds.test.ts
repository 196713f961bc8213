import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  type CliHome,
  cliHome,
  killRunningClis,
  ownerSession,
  runCli,
  saveLogin,
} from "./support/cli.js";
import { LOGIN_KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The keys a developer makes with `gateway keys create` (built CLI, logged in) are, on the owner's
 * dashboard, what the CLI and `/api/keys` call them: the login's per-tool keys, not "standard".
 */

let gw: TestGateway;
let home: CliHome;

beforeAll(async () => {
  gw = await testGateway();
  home = cliHome();
  saveLogin(home, { key: LOGIN_KEY, baseUrl: gw.url, keyId: "kl", accountId: "acct" });
});
afterEach(() => killRunningClis());
afterAll(async () => {
  home?.remove();
  await gw?.close();
});

/** The kind under a key's label in the dashboard's key table, as text. */
function shownKind(html: string, id: string): string {
  const row = new RegExp(`<tr id="key-${id}">[\\s\\S]*?</tr>`).exec(html);
  if (!row) throw new Error(`no row for ${id} on the dashboard`);
  const sub = /<div class="muted small"><code>[^<]*<\/code> · (.*?)<\/div>/.exec(row[0]);
  return (sub?.[1] ?? "").replace(/<[^>]+>/g, "");
}

describe("the dashboard's key table", () => {
  it("names the keys `gateway keys create` made per-tool keys (shared or not); other keys keep their kind", async () => {
    const made: Record<string, string> = {};
    for (const [label, extra] of [
      ["editor", []],
      ["team-demo", ["--shared"]],
    ] as const) {
      const done = await runCli(["keys", "create", "--label", label, "--json", ...extra], home.env);
      expect(done.code, done.stderr).toBe(0);
      made[label] = (JSON.parse(done.stdout) as { id: string }).id;
    }
    const listed = await runCli(["keys", "list", "--json"], home.env);
    expect(
      (JSON.parse(listed.stdout) as { data: { id: string }[] }).data.map((k) => k.id).sort(),
    ).toEqual(Object.values(made).sort());

    const owner = await ownerSession(gw);
    const html = await (
      await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })
    ).text();
    expect(shownKind(html, made.editor)).toBe("per-tool");
    expect(shownKind(html, made["team-demo"])).toBe("per-tool, shared");
    expect(html).toContain('title="made by the CLI of login key kl"');
    // The config's keys are no login's: their kind as stored.
    expect(shownKind(html, "k1")).toBe("standard");
    expect(shownKind(html, "ks")).toBe("shared");
    expect(shownKind(html, "kl")).toBe("login");
  });
});
