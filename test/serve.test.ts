import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { chat } from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-serve-"));
const running: ServeProcess[] = [];
afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

const bin = join(import.meta.dirname, "..", "bin", "gateway");

function runCli(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ["ignore", "pipe", "pipe"], env });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d;
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d;
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  return once(child, "exit").then(([code]) => {
    clearTimeout(timer);
    return { code: code as number | null, stdout, stderr };
  });
}

describe("gateway serve", () => {
  it("creates the demo setup on an empty database and prints a working key once", async () => {
    const db = join(dir, "demo.db");
    const gw = await serveProcess(["--db", db]);
    running.push(gw);
    expect(gw.ready.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(gw.ready.demo_key).toMatch(/^kn-/);
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.ready.demo_key}`, "content-type": "application/json" },
      body: JSON.stringify(chat("hello", "mock-auto")),
    });
    expect(res.status).toBe(200);
    const models = (await (await fetch(`${gw.url}/v1/models`)).json()) as {
      data: { id: string; modality?: string }[];
    };
    const modalities = new Set(models.data.map((m) => m.modality).filter(Boolean));
    for (const m of ["chat", "image", "speech", "transcription", "music", "video"])
      expect(modalities.has(m)).toBe(true);
    expect(models.data.some((m) => m.id.endsWith(":free"))).toBe(true);
    expect(await gw.stop("SIGTERM")).toBe(0);

    const again = await serveProcess(["--db", db]);
    running.push(again);
    expect(again.ready.demo_key).toBeUndefined();
    expect(await again.stop("SIGINT")).toBe(0);
  });

  it("prints a human ready line without --json", async () => {
    const child = spawn(process.execPath, [bin, "serve", "--port", "0", "--db", ":memory:"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const [line] = (await once(child.stdout, "data")) as [Buffer];
    expect(line.toString()).toMatch(
      /^gateway listening on http:\/\/127\.0\.0\.1:\d+ \(ready in \d+ ms\)/,
    );
    child.kill("SIGTERM");
    expect((await once(child, "exit"))[0]).toBe(0);
  });

  it("refuses an invalid config naming every bad path, with exit code 1 and no stack trace", async () => {
    const config = join(dir, "bad.json");
    writeFileSync(
      config,
      JSON.stringify({
        providers: [{ id: "x", wire: "nope" }],
        routes: [{ name: "r", steps: ["r"] }],
      }),
    );
    const { code, stderr } = await runCli([
      "serve",
      "--port",
      "0",
      "--db",
      ":memory:",
      "--config",
      config,
    ]);
    expect(code).toBe(1);
    expect(stderr).toMatch(/invalid .*bad\.json/);
    expect(stderr).toMatch(/providers\[0\]\.wire/);
    expect(stderr).not.toMatch(/\n\s+at /);
  });

  it("says plainly when the port is taken", async () => {
    const blocker = createServer().listen(0, "127.0.0.1");
    await once(blocker, "listening");
    const port = (blocker.address() as { port: number }).port;
    const { code, stderr } = await runCli(["serve", "--port", String(port), "--db", ":memory:"]);
    blocker.close();
    expect(code).toBe(1);
    expect(stderr.trim()).toBe(`gateway: port ${port} is already in use; try --port 0`);
  });

  it("rejects a bad flag value in one line", async () => {
    const { code, stderr } = await runCli(["serve", "--port", "eighty"]);
    expect(code).toBe(2);
    expect(stderr.trim()).toBe('gateway: --port must be a non-negative integer, got "eighty"');
  });

  it("rejects connection timeouts that contradict each other, and a public URL that is not http(s)", async () => {
    const timeouts = await runCli([
      "serve",
      "--db",
      ":memory:",
      "--headers-timeout-ms",
      "5000",
      "--request-timeout-ms",
      "1000",
    ]);
    expect(timeouts.code).toBe(2);
    expect(timeouts.stderr.trim()).toBe(
      "gateway: --headers-timeout-ms cannot be longer than --request-timeout-ms",
    );
    const url = await runCli(["serve", "--db", ":memory:", "--public-url", "gateway.example"]);
    expect(url.code).toBe(2);
    expect(url.stderr).toContain('must be an http:// or https:// URL, got "gateway.example"');
  });

  it("refuses a trusted proxy that is not an address, from --trusted-proxy or GATEWAY_TRUSTED_PROXIES", async () => {
    const flag = await runCli(["serve", "--db", ":memory:", "--trusted-proxy", "10.0.0.0/33"]);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain(
      'must be an IPv4 or IPv6 address or a CIDR range (10.0.0.0/8), got "10.0.0.0/33"',
    );
    const env = { ...process.env, GATEWAY_TRUSTED_PROXIES: "127.0.0.1, proxy.internal" };
    const fromEnv = await runCli(["serve", "--db", ":memory:"], env);
    expect(fromEnv.code).toBe(2);
    expect(fromEnv.stderr).toContain(
      'must be an IPv4 or IPv6 address or a CIDR range (10.0.0.0/8), got "proxy.internal"',
    );
  });

  it("names a Postgres database it cannot reach without its password, from --db or GATEWAY_DB_URL", async () => {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    const url = "postgres://gateway:hunter2-secret@127.0.0.1:1/gateway";
    for (const [args, env] of [
      [["serve", "--db", url], process.env],
      [["serve"], { ...process.env, GATEWAY_DB_URL: url }],
    ] as const) {
      const run = await runCli([...args], env);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain(
        "gateway: cannot use the Postgres database postgres://gateway@127.0.0.1:1/gateway:",
      );
      expect(run.stderr).toContain("ECONNREFUSED");
      expect(run.stderr).not.toContain("hunter2");
      expect(run.stderr).not.toMatch(/\n\s+at /);
    }
    const wrong = await runCli(["serve"], { ...process.env, GATEWAY_DB_URL: "mysql://x" });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("GATEWAY_DB_URL must be a postgres:// URL");
  });

  it("commands that open the SQLite file refuse a Postgres URL and say what to do instead", async () => {
    const url = "postgres://gateway:hunter2-secret@127.0.0.1:1/gateway";
    const refusals: [string[], string][] = [
      [["keys", "create", "--db", url, "--label", "x"], "owner dashboard or with the admin API"],
      [["owner-link", "--db", url], "prints its own owner link"],
      [["secrets", "rotate", "--db", url], "GATEWAY_SECRET_KEY"],
    ];
    for (const [args, hint] of refusals) {
      const run = await runCli(args);
      // A --db the command cannot use, as a directory: the command line's mistake.
      expect(run.code, args.join(" ")).toBe(2);
      expect(run.stderr).toContain("--db takes a SQLite file here, not a Postgres URL");
      expect(run.stderr).toContain(hint);
      expect(run.stderr).not.toContain("hunter2");
    }
  });
});

describe("the programmatic API in a script", () => {
  it("close() resolves in a process with nothing else keeping it alive, with the store closed", async () => {
    const db = join(dir, "script.db");
    const index = join(import.meta.dirname, "..", "dist", "index.js");
    const script = `
      const { startGateway } = await import(${JSON.stringify(index)});
      const gw = await startGateway({ db: ${JSON.stringify(db)}, port: 0 });
      await gw.close();
      console.log("closed");
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    const [code] = await once(child, "exit");
    clearTimeout(timer);
    expect(code).toBe(0);
    expect(stdout.trim()).toBe("closed");
    expect(existsSync(`${db}-wal`)).toBe(false);
  });
});
