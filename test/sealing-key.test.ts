import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "./support/cli.js";
import { serveProcess } from "./support/serve-process.js";

/**
 * Issue 29, point 7: the BYOK sealing key of a SQLite database lives in the OS keychain where one
 * works, and beside the database (`<db>.key`) only as an announced fallback. The real binary
 * (`dist/`), with no keychain (no D-Bus session) and with a real one (gnome-keyring in a D-Bus
 * session of its own), so this passes on a machine with or without a keychain.
 */

const root = join(import.meta.dirname, "..");
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function freshDb(): string {
  const dir = mkdtempSync(join(tmpdir(), "gateway-sealing-"));
  dirs.push(dir);
  return join(dir, "gateway.db");
}

/** The test process's environment as a machine without a keychain has it: no D-Bus session. */
function withoutKeychain(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    GATEWAY_SECRET_KEY_STORE: "auto",
    DBUS_SESSION_BUS_ADDRESS: "unix:path=/nonexistent/gateway-test-bus",
    ...extra,
  };
  delete env.DISPLAY;
  delete env.GATEWAY_SECRET_KEY;
  return env;
}

describe("without an OS keychain", () => {
  it("keeps the key in <db>.key, says so in one line on the start that creates it, and not after", async () => {
    const db = freshDb();
    const first = await serveProcess(["--db", db], withoutKeychain());
    expect(await first.stop()).toBe(0);
    const lines = first
      .stderr()
      .split("\n")
      .filter((line) => line.includes("sealing key"));
    expect(lines).toEqual([
      expect.stringMatching(
        new RegExp(
          `^gateway: no OS keychain available \\(.+\\); the BYOK sealing key is kept in ${db}\\.key beside the database \\(set GATEWAY_SECRET_KEY to keep it elsewhere\\)$`,
        ),
      ),
    ]);
    expect(existsSync(`${db}.key`)).toBe(true);

    const second = await serveProcess(["--db", db], withoutKeychain());
    expect(await second.stop()).toBe(0);
    expect(second.stderr()).not.toMatch(/sealing key/);
  }, 30_000);

  it("refuses to start with GATEWAY_SECRET_KEY_STORE=keychain, writing no key file", async () => {
    const db = freshDb();
    const started = await runCli(
      ["serve", "--port", "0", "--db", db],
      withoutKeychain({ GATEWAY_SECRET_KEY_STORE: "keychain" }),
    );
    expect(started.code).not.toBe(0);
    expect(started.stderr).toMatch(
      /GATEWAY_SECRET_KEY_STORE=keychain but no OS keychain is available/,
    );
    expect(existsSync(`${db}.key`)).toBe(false);
  }, 30_000);
});

const haveKeyring =
  spawnSync("sh", ["-c", "command -v dbus-run-session && command -v gnome-keyring-daemon"])
    .status === 0;

/**
 * Runs `script` (a Node ES module) inside a D-Bus session of its own with an unlocked
 * gnome-keyring, which is stopped by its process id at the end.
 */
function inKeyringSession(
  script: string,
  args: string[],
): Promise<{ code: number | null; out: string }> {
  const dir = mkdtempSync(join(tmpdir(), "gateway-keyring-"));
  dirs.push(dir);
  const file = join(dir, "script.mjs");
  writeFileSync(file, script);
  const session = [
    "echo keyring-test-password | gnome-keyring-daemon --foreground --unlock --components=secrets >/dev/null 2>&1 &",
    "daemon=$!",
    "sleep 1",
    `"${process.execPath}" "$@"`,
    "status=$?",
    'kill "$daemon"',
    "exit $status",
  ].join("\n");
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    XDG_DATA_HOME: join(dir, "data"),
    // `gateway serve`'s order, which a gateway started from code takes only when asked
    // (test/kit-sealing-key.test.ts has the kit's own).
    GATEWAY_SECRET_KEY_STORE: "auto",
  };
  delete env.DBUS_SESSION_BUS_ADDRESS;
  delete env.GATEWAY_SECRET_KEY;
  return new Promise((resolve, reject) => {
    const child = spawn("dbus-run-session", ["--", "sh", "-c", session, "sh", file, ...args], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    child.once("error", reject);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe.skipIf(!haveKeyring)("with an OS keychain (gnome-keyring in a D-Bus session)", () => {
  it("keeps the key in the keychain, none beside the database, and opens the database with it again", async () => {
    const db = freshDb();
    const script = `
      const [dist, db] = process.argv.slice(2);
      const { startGateway } = await import(dist);
      const { openKeychain, keychainService } = await import(dist.replace("index.js", "store/os-keychain.js"));
      const { sealingKeyAccount } = await import(dist.replace("index.js", "store/sqlite/sealing-key.js"));
      const first = await startGateway({ db, port: 0 });
      await first.close();
      // A second start reads the key from the keychain: the database's key check opens with it.
      const second = await startGateway({ db, port: 0 });
      await second.close();
      const opened = await openKeychain();
      const stored = opened.ok
        ? await opened.keyring.entry(keychainService, sealingKeyAccount(db)).getPassword()
        : null;
      console.log(JSON.stringify({ keychain: opened.ok, stored: typeof stored === "string" && stored.length > 0 }));
    `;
    const run = await inKeyringSession(script, [join(root, "dist", "index.js"), db]);
    expect(run.code, run.out).toBe(0);
    expect(run.out).toContain('{"keychain":true,"stored":true}');
    expect(run.out).not.toMatch(/no OS keychain available/);
    expect(existsSync(`${db}.key`)).toBe(false);

    // Outside that session the key is nowhere: the folder alone does not open the BYOK keys.
    const elsewhere = await runCli(
      ["serve", "--port", "0", "--db", db],
      withoutKeychain({ GATEWAY_SECRET_KEY_STORE: "file" }),
    );
    expect(elsewhere.code).not.toBe(0);
    expect(elsewhere.stderr).toMatch(/holds BYOK keys sealed with a key that is missing/);
  }, 60_000);

  it("keeps reading an existing <db>.key: a database sealed before the keychain was used still opens", async () => {
    const db = freshDb();
    const before = await serveProcess(["--db", db], { GATEWAY_SECRET_KEY_STORE: "file" });
    expect(await before.stop()).toBe(0);
    expect(existsSync(`${db}.key`)).toBe(true);
    const script = `
      const [dist, db] = process.argv.slice(2);
      const { startGateway } = await import(dist);
      const gw = await startGateway({ db, port: 0 });
      await gw.close();
      console.log("started");
    `;
    const run = await inKeyringSession(script, [join(root, "dist", "index.js"), db]);
    expect(run.code, run.out).toBe(0);
    expect(run.out).toContain("started");
    expect(existsSync(`${db}.key`)).toBe(true);
  }, 60_000);
});
