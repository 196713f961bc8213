import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { detectCliPrefix } from "../src/cli-command.js";
import { cliHome, killRunningClis, runCli, spawnCli } from "./support/cli.js";
import { type TestGateway, testGateway } from "./support/gateway.js";

/**
 * `gateway` is on the PATH only after a global install: every command the product prints is
 * the one that works where it runs (`npx gateway ...` in a clone or a project that depends on the
 * package, `gateway ...` when installed globally).
 */

const repo = join(import.meta.dirname, "..");
const bin = join(repo, "bin", "gateway");
const noGlobal = { PATH: "/usr/bin:/bin" };

const dirs: string[] = [];
let gw: TestGateway | undefined;
afterEach(async () => {
  killRunningClis();
  await gw?.close();
  gw = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "gateway-cmd-"));
  dirs.push(dir);
  return dir;
};

describe("how the product names the CLI", () => {
  it("in a clone of the package (after npm ci): npx gateway", () => {
    expect(detectCliPrefix(noGlobal, repo)).toBe("npx gateway");
    expect(detectCliPrefix(noGlobal, join(repo, "src", "cli"))).toBe("npx gateway");
  });

  it("in a project that depends on the package: npx gateway", () => {
    const project = tempDir();
    writeFileSync(join(project, "package.json"), '{"name":"app","private":true}');
    mkdirSync(join(project, "node_modules", ".bin"), { recursive: true });
    symlinkSync(bin, join(project, "node_modules", ".bin", "gateway"));
    expect(detectCliPrefix(noGlobal, project)).toBe("npx gateway");
  });

  it("installed globally (gateway on the PATH): gateway", () => {
    const globalBin = tempDir();
    symlinkSync(bin, join(globalBin, "gateway"));
    expect(detectCliPrefix({ PATH: `${globalBin}:/usr/bin` }, tempDir())).toBe("gateway");
  });

  it("anywhere else: node and the path of the CLI; another package's gateway does not count", () => {
    const elsewhere = tempDir();
    const otherBin = tempDir();
    writeFileSync(join(otherBin, "gateway"), "#!/bin/sh\necho another gateway\n");
    expect(detectCliPrefix({ PATH: `${otherBin}:/usr/bin` }, elsewhere)).toBe(`node ${bin}`);
  });
});

describe("the commands the product prints run as written", () => {
  it("serve's hint on an existing database, run from the clone with no global gateway", async () => {
    const dir = tempDir();
    const db = join(dir, "g.db");
    let hint: string | undefined;
    const home = cliHome({
      PATH: `${process.env.PATH}`
        .split(":")
        .filter((p) => !/gateway/.test(p))
        .join(":"),
    });
    try {
      // The first start creates the demo setup in g.db; the second finds it and prints the hint.
      for (const run of ["first", "second"]) {
        const serve = spawnCli(["serve", "--port", "0", "--db", db], home.env);
        await serve.waitFor(/gateway listening on/, 60_000);
        if (run === "first") {
          await serve.waitFor(/demo key/);
        } else {
          const [, printed] = await serve.waitFor(/a new one: (.+)\n/);
          hint = printed;
        }
        serve.child.kill("SIGTERM");
        await serve.exit(30_000);
      }
      expect(hint).toBe(`npx gateway keys create --db ${db} --label NAME`);
      const key = execFileSync("sh", ["-c", hint!.replace("NAME", "from-hint")], {
        cwd: repo,
        env: home.env,
        timeout: 120_000,
      })
        .toString()
        .trim();
      expect(key).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
    } finally {
      home.remove();
    }
  }, 180_000);

  it("the sign-in page and an error of the CLI name the same command", async () => {
    gw = await testGateway();
    const page = await (await fetch(`${gw.url}/dashboard/device?user_code=BCDF-GHJK`)).text();
    expect(page).toContain('<pre class="cmd">npx gateway dashboard</pre>');
    expect(page).toContain("<code>npx gateway owner-link</code>");
    expect(page).not.toMatch(/>gateway (dashboard|owner-link)</);
    const home = cliHome();
    try {
      const done = await runCli(["keys", "list"], { ...home.env, ...noGlobal }, 30_000);
      expect(done.stderr).toContain("run `npx gateway login`");
    } finally {
      home.remove();
    }
  }, 60_000);
});

describe("the dashboard API without a session", () => {
  it("names the command as the sign-in page does", async () => {
    gw = await testGateway();
    const page = await (await fetch(`${gw.url}/dashboard`)).text();
    const command = /<pre class="cmd">([^<]+)<\/pre>/.exec(page)?.[1];
    expect(command).toMatch(/^(npx gateway|gateway|node \S+) dashboard$/);
    const res = await fetch(`${gw.url}/api/dashboard/account`);
    expect(res.status).toBe(401);
    expect(await res.text()).toBe(
      `no dashboard session: run \`${command}\` where \`gateway serve\` runs, or open the owner URL it printed`,
    );
  });
});

describe("--json times", () => {
  let own: TestGateway | undefined;
  afterEach(async () => {
    await own?.close();
    own = undefined;
  });

  it("are ISO 8601", async () => {
    own = await testGateway();
    const home = cliHome();
    try {
      const done = await runCli(["keys", "create", "--db", own.dbPath, "--json"], home.env, 30_000);
      expect(done.code).toBe(0);
      const created = JSON.parse(done.stdout) as { created_at: string };
      expect(created.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    } finally {
      home.remove();
    }
  });
});
