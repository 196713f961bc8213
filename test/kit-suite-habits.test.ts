import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, type RunningGateway, startGateway } from "../src/index.js";
import { baseConfig, chat, KEY, post } from "./support/gateway.js";

/**
 * What a developer's suite does with startGateway(), as it would be written: one gateway shared
 * by tests that run at once, each awaiting its own requests and reading them back; closing it
 * twice, or with a stream open; cassette folders that are missing or read-only. Each works or
 * says why, none hangs, and a closed gateway holds nothing of the process.
 */

const root = mkdtempSync(join(tmpdir(), "gateway-kit-habits-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The listening servers of the process, right now (`process.getActiveResourcesInfo()`). */
const servers = () => process.getActiveResourcesInfo().filter((r) => r === "TCPServerWrap").length;
/** Its TCP connections, both ends: the clients' close a turn after the gateway's. */
const sockets = () => process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;

/** Waits (a bounded number of event-loop turns) until `done()` holds. */
async function eventually(done: () => boolean): Promise<boolean> {
  for (let turn = 0; turn < 200; turn++) {
    if (done()) return true;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return false;
}

const client = (gw: RunningGateway) =>
  new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });

describe.concurrent("one gateway shared by tests that run at once", () => {
  let gw: RunningGateway;
  beforeAll(async () => {
    gw = await startGateway({ config: baseConfig() });
    return () => gw.close();
  });

  for (const n of [1, 2, 3, 4, 5, 6]) {
    it(`test ${n} finds the request it awaited by its id, with its charge`, async () => {
      const words = `[[mock:words=${n * 3}]] test ${n}`;
      const streamed = n % 2 === 0;
      let id: string | null | undefined;
      if (streamed) {
        // Read to its end: it is listed once its client saw it finish.
        const stream = await client(gw).chat.completions.create({
          model: "mock-gpt",
          messages: [{ role: "user", content: words }],
          stream: true,
          stream_options: { include_usage: true },
        });
        for await (const _ of stream);
        id = stream._request_id;
      } else {
        const answer = await client(gw).chat.completions.create({
          model: "mock-gpt",
          messages: [{ role: "user", content: words }],
        });
        id = answer._request_id;
      }
      expect(id).toBeTruthy();
      const rows = await gw.listRequests({ limit: 100 });
      const mine = rows.find((r) => r.id === id);
      expect(mine?.status).toBe(200);
      expect(mine?.stream).toBe(streamed);
      expect(mine?.cost_micro).toBeGreaterThan(0);
    });
  }
});

describe("closing", () => {
  it("twice gives the same promise, and a closed gateway holds no handle of the process", async () => {
    const before = { servers: servers(), sockets: sockets() };
    const gw = await startGateway({ config: baseConfig(), db: join(root, "twice.db") });
    expect((await post(gw, "/v1/chat/completions", chat("hi"))).status).toBe(200);
    const first = gw.close();
    expect(gw.close()).toBe(first);
    await first;
    await gw.close();
    await expect(gw.listRequests()).rejects.toThrow(/closed/);
    // Its server is gone once close() resolved; the connections' client ends follow.
    expect(servers()).toBe(before.servers);
    expect(await eventually(() => sockets() <= before.sockets)).toBe(true);
  });

  it("with a stream open: the close ends, the client's read fails, nothing is left held", async () => {
    const before = { servers: servers(), sockets: sockets() };
    const gw = await startGateway({ config: baseConfig() });
    const res = await post(gw, "/v1/chat/completions", {
      ...chat("[[mock:words=100000]] long"),
      stream: true,
    });
    const reader = res.body!.getReader();
    await reader.read();
    await gw.close();
    await expect(
      (async () => {
        for (;;) if ((await reader.read()).done) return "ended";
      })(),
    ).rejects.toThrow();
    // Its server is gone once close() resolved; the connections' client ends follow.
    expect(servers()).toBe(before.servers);
    expect(await eventually(() => sockets() <= before.sockets)).toBe(true);
  });
});

describe("cassette folders", () => {
  it("one that does not exist: a replay is refused naming it, a recording makes it", async () => {
    const missing = join(root, "missing", "cassettes");
    const refused = await startGateway({
      config: baseConfig(),
      cassettes: { dir: missing, mode: "replay" },
    }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toContain(`${missing} does not exist`);
    const before = { servers: servers(), sockets: sockets() };
    const gw = await startGateway({
      config: baseConfig(),
      cassettes: { dir: missing, mode: "record-missing" },
    });
    expect(readdirSync(missing)).toEqual([]);
    await gw.close();
    // Its server is gone once close() resolved; the connections' client ends follow.
    expect(servers()).toBe(before.servers);
    expect(await eventually(() => sockets() <= before.sockets)).toBe(true);
  });

  it.skipIf(process.getuid?.() === 0)(
    "a read-only one: a recording is refused naming it, a replay from it answers",
    async () => {
      const dir = join(root, "read-only");
      mkdirSync(dir);
      writeFileSync(join(dir, "README"), "not a cassette");
      chmodSync(dir, 0o500);
      try {
        const refused = await startGateway({
          config: baseConfig(),
          cassettes: { dir, mode: "record-missing" },
        }).catch((err: unknown) => err);
        expect(refused).toBeInstanceOf(ConfigError);
        expect((refused as Error).message).toContain(`${dir} is not writable`);
        const gw = await startGateway({ config: baseConfig(), cassettes: { dir, mode: "replay" } });
        // A mock model makes no upstream call: the replay has nothing to miss.
        expect((await post(gw, "/v1/chat/completions", chat("hi"))).status).toBe(200);
        await gw.close();
      } finally {
        chmodSync(dir, 0o700);
      }
    },
  );
});
