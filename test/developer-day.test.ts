import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { quota } from "./support/api.js";
import { cliHome, killRunningClis, runCli } from "./support/cli.js";
import {
  baseConfigWith,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { mcpClient } from "./support/mcp.js";

/**
 * A developer's day as a client: MCP cancellation, request ids on every answer, and the CLI's
 * mistakes. Each test names the behaviour it expects.
 */

let gw: TestGateway | undefined;
const clients: Client[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  await gw?.close();
  gw = undefined;
  killRunningClis();
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const micro = (idr: number) => Math.round(idr * 1_000_000);

async function connectMcp(key = KEY): Promise<Client> {
  const { client } = await mcpClient(gw!.url, key, "developer-day");
  clients.push(client);
  return client;
}

describe("MCP: a tool call the client cancels", () => {
  it("is abandoned like a /v1 request whose client left: the twin ends client_closed and nothing is charged", async () => {
    gw = await testGateway();
    const client = await connectMcp();
    const before = micro((await quota(gw)).balance_idr);

    // The SDK's way to give up on a call (also what its 60 s request timeout does): the call's
    // promise rejects and a notifications/cancelled naming the request goes to the server.
    const abort = new AbortController();
    const call = client
      .callTool(
        {
          name: "chat",
          arguments: { model: "mock-gpt", prompt: "take your time [[mock:delay=4000]]" },
        },
        undefined,
        { signal: abort.signal },
      )
      .then(
        () => "answered",
        (err: unknown) => err,
      );
    // Bounded wait until the /v1 twin is admitted: its worst case is held on the balance.
    for (let i = 0; i < 400 && (await quota(gw)).held_idr === 0; i++) await pause(10);
    expect((await quota(gw)).held_idr).toBeGreaterThan(0);
    abort.abort("the user pressed Esc");
    expect(await call).toBeInstanceOf(Error);

    // Bounded wait until the twin has ended, however it ends: its row is written when it ends.
    for (let i = 0; i < 800 && (await gw.listRequests({ limit: 1 })).length === 0; i++) {
      await pause(10);
    }
    const [row] = await gw.listRequests({ limit: 1 });
    // A /v1 client that leaves mid-request is logged 499 client_closed and pays nothing (the
    // meter: a request that delivered nothing is free); the MCP twin must be the same.
    expect(row).toMatchObject({ via: "mcp", error_code: "client_closed", cost_micro: 0 });
    expect(micro((await quota(gw)).balance_idr)).toBe(before);
  });
});

/** Raw bytes to the gateway's port; the whole answer once the server closes (bounded). */
function rawExchange(url: string, bytes: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = netConnect(Number(new URL(url).port), "127.0.0.1");
    let answer = "";
    const timer = setTimeout(() => socket.destroy(), 5_000);
    socket.on("data", (chunk: Buffer) => {
      answer += chunk.toString("latin1");
    });
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(answer);
    });
    socket.on("error", () => {});
    socket.write(bytes);
  });
}

const headerOf = (answer: string, name: string) =>
  answer
    .split("\r\n\r\n")[0]!
    .split("\r\n")
    .slice(1)
    .map((line) => line.split(/:\s*/, 2) as [string, string])
    .find(([field]) => field.toLowerCase() === name)?.[1];

describe("request ids on every answer", () => {
  it("the plain answers the server gives before routing (431, 400, CONNECT's 405) carry x-request-id too", async () => {
    gw = await testGateway();
    const answers = {
      oversizedHeaders: await rawExchange(
        gw.url,
        `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: ${"a".repeat(20_000)}\r\n\r\n`,
      ),
      malformed: await rawExchange(gw.url, "NOT-HTTP\r\n\r\n"),
      connect: await rawExchange(gw.url, "CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
    };
    for (const [what, answer] of Object.entries(answers)) {
      expect(answer, what).toMatch(/^HTTP\/1\.1 4\d\d /);
      expect(headerOf(answer, "x-request-id"), what).toMatch(/^req_[\w-]+$/);
    }
  });
});

describe("a newcomer's first hour: the base URL slip between the two SDKs", () => {
  it("the openai SDK given the gateway's address without /v1, and the anthropic SDK given it with /v1, get a 404 naming the path to send and why", async () => {
    gw = await testGateway();
    // The OpenAI SDKs' base URL ends in /v1; the Anthropic SDKs add /v1 themselves.
    const openai = new OpenAI({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const refusals = await Promise.all([
      openai.chat.completions
        .create({ model: "mock-gpt", messages: [{ role: "user", content: "hi" }] })
        .catch((err: unknown) => err),
      openai.models.list().catch((err: unknown) => err),
      anthropic.messages
        .create({ model: "mock-gpt", max_tokens: 10, messages: [{ role: "user", content: "hi" }] })
        .catch((err: unknown) => err),
    ]);
    const seen = refusals.map((err) => {
      const { status, message } = err as { status?: number; message: string };
      return { status, message };
    });
    expect(seen).toEqual([
      {
        status: 404,
        message: expect.stringMatching(
          /send it to POST \/v1\/chat\/completions \(the API is under \/v1: an OpenAI SDK's base URL ends in \/v1/,
        ),
      },
      {
        status: 404,
        message: expect.stringMatching(/send it to GET \/v1\/models \(the API is under \/v1/),
      },
      {
        status: 404,
        message: expect.stringMatching(
          /not_found_error.*send it to POST \/v1\/messages \(an Anthropic SDK adds \/v1 itself: its base URL is the gateway's address alone\)/,
        ),
      },
    ]);
  });
});

describe("the CLI's mistakes: one line, the right exit code, never 'please report'", () => {
  it("gateway mcp with an agent it does not know is a command-line mistake: exit 2", async () => {
    const home = cliHome();
    try {
      const done = await runCli(["mcp", "emacs"], home.env);
      expect(done.stderr.trim()).toBe(
        'gateway: unknown agent "emacs"; choose from claude-code, codex, cursor, vscode',
      );
      expect(done.code).toBe(2);
    } finally {
      home.remove();
    }
  });

  /** `gateway serve` run as an unprivileged user: nobody when the test runs as root. */
  function serveUnprivileged(args: string[], cwd: string) {
    const asRoot = process.getuid?.() === 0;
    const bin = join(import.meta.dirname, "..", "bin", "gateway");
    const child = spawn(process.execPath, [bin, "serve", ...args], {
      cwd,
      env: { ...process.env, HOME: cwd, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      ...(asRoot ? { uid: 65534, gid: 65534 } : {}),
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      child.once("exit", (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  const privilegedPortsExist = (() => {
    try {
      return Number(readFileSync("/proc/sys/net/ipv4/ip_unprivileged_port_start", "utf8")) > 80;
    } catch {
      return process.platform !== "win32";
    }
  })();

  it.skipIf(process.platform === "win32" || !privilegedPortsExist)(
    "a port the user may not bind (--port 80 without privileges) is one clear line, exit 1",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "hunt-devday-"));
      chmodSync(dir, 0o777);
      try {
        const done = await serveUnprivileged(["--port", "80", "--db", ":memory:"], dir);
        expect(done.stderr).not.toMatch(/unexpected error|please report/i);
        expect(done.stderr.trim().split("\n")).toHaveLength(1);
        expect(done.stderr).toMatch(/^gateway: .*\b80\b/);
        expect(done.code).toBe(1);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it.skipIf(process.platform === "win32")(
    "a --db in a directory the user may not write is one clear line naming it, exit 1",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "hunt-devday-"));
      chmodSync(dir, 0o777);
      const locked = mkdtempSync(join(dir, "locked-"));
      chmodSync(locked, 0o555);
      try {
        const db = join(locked, "gateway.db");
        const done = await serveUnprivileged(["--port", "0", "--db", db], dir);
        expect(done.stderr).not.toMatch(/unexpected error|please report/i);
        expect(done.stderr.trim().split("\n")).toHaveLength(1);
        expect(done.stderr).toContain(locked);
        expect(done.stderr).toMatch(/permission denied/);
        expect(done.code).toBe(1);
      } finally {
        chmodSync(locked, 0o755);
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

describe("closing a gateway with work in flight", () => {
  it("close() resolves with a stream, a job, a held burst wait and MCP calls in flight, and every client gets an end", async () => {
    gw = await testGateway({
      config: baseConfigWith({
        providers: [{ id: "slow", wire: "mock", mock: { job_seconds: 3600 } }],
        models: [{ name: "slow-music", provider: "slow", modality: "music", price_per_unit: 1 }],
        tiers: { free: { free_rpm: 100, free_daily: 100 } },
      }),
      clock: "manual",
      autoAdvance: false,
    });
    const stream = await post(
      gw,
      "/v1/chat/completions",
      chat("hi [[mock:delay=30000]]", "mock-gpt", { stream: true }),
    );
    expect(stream.status).toBe(200);
    const streamText = stream.text().then(
      () => "ended",
      () => "ended",
    );
    expect(
      (await post(gw, "/v1/music/generations", { model: "slow-music", prompt: "x" })).status,
    ).toBe(202);
    expect((await post(gw, "/v1/chat/completions", chat("a", "mock-gpt:free"))).status).toBe(200);
    // Held on its burst slot: the clock does not move by itself.
    const held = post(gw, "/v1/chat/completions", chat("b", "mock-gpt:free")).then(
      () => "ended",
      () => "ended",
    );
    const client = await connectMcp();
    const slowCall = client
      .callTool({
        name: "chat",
        arguments: { model: "mock-gpt", prompt: "x [[mock:delay=30000]]" },
      })
      .then(
        () => "ended",
        () => "ended",
      );
    const heldCall = client
      .callTool({ name: "chat", arguments: { model: "mock-gpt:free", prompt: "y" } })
      .then(
        () => "ended",
        () => "ended",
      );
    // Bounded: until the paid ones hold their worst case, and the free ones had time to queue.
    for (let i = 0; i < 400 && (await quota(gw)).held_idr === 0; i++) await pause(10);
    await pause(200);
    const bound = (p: Promise<unknown>) =>
      Promise.race([p.then(() => "done"), pause(10_000).then(() => "still waiting")]);
    const closing = gw;
    gw = undefined;
    expect(await bound(closing.close())).toBe("done");
    expect(await bound(Promise.all([streamText, held, slowCall, heldCall]))).toBe("done");
  });
});
