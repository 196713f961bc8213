import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmdirSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { fillDatabase, makeRoom as makeRoomIn } from "./support/database-file.js";
import { type FakeUpstream, fakeUpstream, sleep } from "./support/fake-upstream.js";
import { baseConfigWith, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Issue 12, point 5: the database's disk fills up. The client gets a 503 that says nothing was
 * charged, the operator one log line naming the database, readiness reports it, and the gateway
 * recovers once space is freed, with every success charged exactly once.
 */

const mountPoint = mkdtempSync(join(tmpdir(), "gateway-full-"));
let mounted = false;
let whyNot = "";
try {
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mountPoint], { stdio: "pipe" });
  mounted = true;
} catch (err) {
  whyNot = (err as Error).message.split("\n")[0];
}
if (!mounted) console.warn(`storage-full tests skipped: cannot mount a tmpfs (${whyNot})`);

afterAll(() => {
  if (mounted) {
    try {
      execFileSync("umount", [mountPoint], { stdio: "pipe" });
    } catch {
      // A gateway that failed to close still holds its files: detach the mount anyway.
      execFileSync("umount", ["-l", mountPoint], { stdio: "pipe" });
    }
  }
  rmdirSync(mountPoint);
});

const filler = join(mountPoint, "filler");

/** Writes until the filesystem refuses another byte. */
function fillDisk(): void {
  const fd = openSync(filler, "w");
  const block = Buffer.alloc(64 * 1024, 1);
  try {
    for (let size = block.length; size >= 1; ) {
      try {
        writeSync(fd, block, 0, size);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
        size = Math.floor(size / 2);
      }
    }
  } finally {
    closeSync(fd);
  }
}

describe.skipIf(!mounted)("a full disk under the database", () => {
  let gw: TestGateway;
  let upstream: FakeUpstream;
  const logged: string[] = [];
  beforeAll(async () => {
    vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      logged.push(args.map(String).join(" "));
    });
    upstream = await fakeUpstream("openai");
    gw = await testGateway({
      db: join(mountPoint, "gateway.db"),
      // One instant: the key's last use is written once, so every later write is a settlement.
      now: () => 1_800_000_000_000,
      config: baseConfigWith({
        providers: [
          { id: "paid", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-full-disk"] },
        ],
        models: [{ name: "paid-model", provider: "paid", price_input_per_mtok: 1_000_000 }],
      }),
    });
  });
  afterAll(async () => {
    rmSync(filler, { force: true });
    await gw?.close();
    await upstream?.close();
    vi.restoreAllMocks();
  });

  // Read after `ledger.flush()`: the cached row then holds what the database holds.
  const balance = () => gw.services.store.getAccount("acct")!.balance_micro;
  /** Every row of the log; one instant, so newest first is the reverse of the writes' order. */
  const log = () => gw.services.store.requestLog("acct", 1e9);

  it("answers 503 storage_unavailable, charges nothing, and recovers when space returns", async () => {
    const warmUp = await post(gw, "/v1/chat/completions", chat("before", "paid-model"));
    expect(warmUp.status).toBe(200);
    await warmUp.json();
    gw.services.ledger.flush();
    const startBalance = balance();
    expect(gw.services.ledger.storageFault()).toBeNull();
    fillDisk();
    upstream.reset();

    // Bursts of requests in flight together: their settlements share a commit, with no journal.
    let succeeded = 0;
    let refused: Response | undefined;
    for (let round = 0; round < 500 && !refused; round++) {
      const burst = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          post(gw, "/v1/chat/completions", chat(`request ${round}.${i} `.repeat(40), "paid-model")),
        ),
      );
      for (const res of burst) {
        if (res.status === 200) {
          await res.json();
          succeeded++;
        } else if (refused) await res.text();
        else refused = res;
      }
    }
    expect(refused?.status).toBe(503);
    // Refused requests were answered upstream: their charges are what could not be written.
    expect(upstream.requests.length).toBeGreaterThan(succeeded);
    expect(refused!.headers.get("retry-after")).toBe("30");
    expect(await refused!.json()).toEqual({
      error: {
        type: "storage_unavailable",
        code: "storage_unavailable",
        param: null,
        message:
          "The gateway cannot record requests right now (its disk is full), so this one was not served and nothing was charged. Retry later.",
      },
    });

    // Until space returns, requests are refused before they cost an upstream call, in each style.
    upstream.reset();
    const messages = await post(gw, "/v1/messages", {
      model: "paid-model",
      max_tokens: 50,
      messages: [{ role: "user", content: "still full?" }],
    });
    expect(messages.status).toBe(503);
    expect(messages.headers.get("retry-after")).toBe("30");
    expect(await messages.json()).toMatchObject({
      type: "error",
      error: { type: "api_error", message: expect.stringMatching(/nothing was charged/) },
    });
    const streamed = await post(
      gw,
      "/v1/chat/completions",
      chat("stream me", "paid-model", { stream: true }),
    );
    const text = await streamed.text();
    expect(text).not.toContain("[DONE]");
    expect(text).toMatch(/"code":"storage_unavailable"/);

    const notReady = await fetch(`${gw.url}/health/ready`);
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toMatchObject({ reason: "storage_unavailable" });

    const fault = gw.services.ledger.storageFault();
    expect(fault).toMatchObject({ path: gw.dbPath, message: expect.stringMatching(/full/) });
    expect(fault!.since).toBeGreaterThan(Date.now() - 60_000);
    const faultLines = logged.filter((l) => l.includes("cannot write"));
    expect(faultLines).toEqual([
      `gateway: cannot write ${gw.dbPath}: database or disk is full; requests get 503 storage_unavailable until space is freed`,
    ]);
    expect(logged.filter((l) => /internal error|\n\s+at /.test(l))).toEqual([]);

    // Space returns: readiness notices it without a request, then requests are served again.
    rmSync(filler);
    await sleep(1_100);
    expect(gw.services.ledger.storageFault()).toBeNull();
    expect((await fetch(`${gw.url}/health/ready`)).status).toBe(200);
    const after = await post(gw, "/v1/chat/completions", chat("space again", "paid-model"));
    expect(after.status).toBe(200);
    await after.json();
    succeeded++;
    gw.services.ledger.flush();

    // Every success a client saw has exactly one charged row, and only those were charged.
    const settledRows = log().filter((row) => row.state === "settled");
    const settled = {
      n: settledRows.length,
      cost: settledRows.reduce((sum, row) => sum + row.cost_micro, 0),
    };
    expect(settled.n).toBe(succeeded + 1); // and the warm-up
    expect(settled.cost).toBeGreaterThan(0);
    const warmUpCost = log().at(-1)!.cost_micro;
    expect(balance()).toBe(startBalance - (settled.cost - warmUpCost));
  }, 120_000);
});

/**
 * SQLite's own limit on the database's pages gives the same SQLITE_FULL as a full disk, on any
 * machine: here a stream whose charge cannot be committed.
 */
describe("a database that cannot grow", () => {
  let gw: TestGateway;
  beforeAll(async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    gw = await testGateway({ now: () => 1_800_000_000_000 });
  });
  afterAll(async () => {
    if (gw) makeRoomIn(gw.services.store);
    await gw?.close();
    vi.restoreAllMocks();
  });

  /** A request held in flight (so charges wait for a shared commit), then no page left. */
  async function fillWhileOneWaits(): Promise<{ inFlight: Promise<Response> }> {
    const inFlight = post(gw, "/v1/chat/completions", chat("slow [[mock:delay=3000]]"));
    for (let i = 0; i < 250 && gw.services.ledger.heldMicro("acct") === 0; i++) await sleep(20);
    expect(gw.services.ledger.heldMicro("acct")).toBeGreaterThan(0);
    fillDatabase(gw.services.store);
    // Wrapped: an async function would otherwise wait for the response it returns.
    return { inFlight };
  }

  async function makeRoom(): Promise<void> {
    makeRoomIn(gw.services.store);
    await sleep(1_100);
    expect(gw.services.ledger.storageFault()).toBeNull();
  }

  it("ends a stream with a storage_unavailable error event, never its closing event", async () => {
    const warmUp = await post(gw, "/v1/chat/completions", chat("before"));
    expect(warmUp.status).toBe(200);
    await warmUp.json();
    gw.services.ledger.flush();
    const log = () => gw.services.store.requestLog("acct", 1e9);
    const rowsBefore = log().length;
    const { inFlight } = await fillWhileOneWaits();

    const streamed = await post(
      gw,
      "/v1/chat/completions",
      chat("stream me", "mock-gpt", { stream: true }),
    );
    expect(streamed.status).toBe(200);
    const text = await streamed.text();
    expect(text).not.toContain("[DONE]");
    expect(text).toMatch(/"code":"storage_unavailable"/);
    expect(text).toMatch(/nothing was charged/);
    expect(gw.services.ledger.storageFault()?.path).toBe(gw.dbPath);
    // The slow request ended after the stream, alone (its charge went to the journal, durable:
    // 200) or with it in the batch that failed (503).
    const slow = await inFlight;
    expect([200, 503]).toContain(slow.status);
    await slow.json();

    await makeRoom();
    // A journaled charge landed once space returned; the broken stream left no row.
    gw.services.ledger.flush();
    // One instant: the log's newest-first order is the reverse of the writes' order.
    expect(
      log()
        .reverse()
        .slice(rowsBefore)
        .map(({ stream, state }) => ({ stream, state })),
    ).toEqual(slow.status === 200 ? [{ stream: 0, state: "settled" }] : []);
  }, 30_000);

  it("settles a delivered image whose charge could not be written once, releasing its hold once", async () => {
    const { inFlight } = await fillWhileOneWaits();
    const image = await post(gw, "/v1/images/generations", {
      model: "mock-image",
      prompt: "a cat",
    });
    expect(image.status).toBe(503);
    expect(await image.json()).toMatchObject({ error: { code: "storage_unavailable" } });
    await (await inFlight).text();
    await makeRoom();
    expect(gw.services.ledger.heldMicro("acct")).toBe(0);
    const after = await post(gw, "/v1/images/generations", {
      model: "mock-image",
      prompt: "a cat",
    });
    expect(after.status).toBe(200);
  }, 30_000);
});
