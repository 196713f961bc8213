import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { runCli } from "./support/cli.js";
import { balanceOnDisk, requestLogOnDisk } from "./support/database-file.js";
import { sleep } from "./support/fake-upstream.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Issue 29, points 2 and 3: the database's file taken away while serving (deleted, or replaced by
 * another file), and a disk that refuses writes (read-only, I/O errors). Each is the full disk's
 * answer: 503 storage_unavailable in the route's style, readiness 503, one log line, and nothing
 * written where it would be lost; a disk that takes writes again is used again.
 */

let gw: TestGateway | undefined;
let logged: string[] = [];
beforeEach(() => {
  logged = [];
  vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
    logged.push(args.map(String).join(" "));
  });
});
afterEach(async () => {
  await gw?.close().catch(() => {});
  gw = undefined;
  vi.restoreAllMocks();
});

// One instant: the key's last use is written once, so every later write is a settlement.
const start = (db?: string) => testGateway({ db, now: () => 1_800_000_000_000 });

async function served(g: TestGateway, content: string): Promise<Response> {
  return post(g, "/v1/chat/completions", chat(content));
}

async function expectStorage503(res: Response, reason: RegExp): Promise<void> {
  expect(res.status).toBe(503);
  expect(res.headers.get("retry-after")).toBe("30");
  const body = (await res.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe("storage_unavailable");
  expect(body.error.message).toMatch(reason);
  expect(body.error.message).toMatch(/nothing was charged/);
}

async function readiness(g: TestGateway): Promise<{ status: number; reason?: string }> {
  const res = await fetch(`${g.url}/health/ready`);
  const body = (await res.json()) as { reason?: string };
  return { status: res.status, reason: body.reason };
}

/**
 * What the database a gateway lost holds, read from a copy of its file and WAL (hard links kept
 * to them before they were taken away): the account's balance and the request log's length.
 */
function lostContents(keptDb: string): { balance: number; rows: number } {
  const dir = mkdtempSync(join(tmpdir(), "gateway-lost-copy-"));
  try {
    const copy = join(dir, "copy.db");
    copyFileSync(keptDb, copy);
    if (existsSync(`${keptDb}-wal`)) copyFileSync(`${keptDb}-wal`, `${copy}-wal`);
    return { balance: balanceOnDisk(copy, "acct"), rows: requestLogOnDisk(copy).length };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Hard links to the database's file and WAL: the same files, still readable once unlinked. */
function keepLinks(g: TestGateway): string {
  const kept = join(g.dir, "kept.db");
  linkSync(g.dbPath, kept);
  if (existsSync(`${g.dbPath}-wal`)) linkSync(`${g.dbPath}-wal`, `${kept}-wal`);
  return kept;
}

describe("the database file deleted while serving", () => {
  it("answers 503 storage_unavailable, fails readiness, logs once and writes nothing more", async () => {
    gw = await start();
    const g = gw;
    const warmUp = await served(g, "before");
    expect(warmUp.status).toBe(200);
    await warmUp.json();
    g.services.ledger.flush();
    const kept = keepLinks(g);
    const atLoss = lostContents(kept);

    // As `rm gateway.db*` does.
    for (const name of readdirSync(g.dir)) {
      if (name.startsWith(basename(g.dbPath))) unlinkSync(join(g.dir, name));
    }
    await sleep(100);

    await expectStorage503(await served(g, "after"), /database file was removed/);
    await expectStorage503(await served(g, "again"), /database file was removed/);
    const messages = await post(g, "/v1/messages", {
      model: "mock-gpt",
      max_tokens: 20,
      messages: [{ role: "user", content: "still there?" }],
    });
    expect(messages.status).toBe(503);
    expect(await messages.json()).toMatchObject({
      type: "error",
      error: { message: expect.stringMatching(/database file was removed/) },
    });
    const stream = await post(
      g,
      "/v1/chat/completions",
      chat("stream", "mock-gpt", { stream: true }),
    );
    expect(await stream.text()).toMatch(/storage_unavailable/);
    expect(await readiness(g)).toEqual({ status: 503, reason: "storage_unavailable" });

    expect(logged.filter((line) => line.includes(g.dbPath))).toEqual([
      `gateway: ${g.dbPath} was deleted while the gateway was serving (the file it opened is no longer the one at that path); requests get 503 storage_unavailable and nothing more is written to it; restart the gateway to open the file now at that path`,
    ]);
    expect(logged.filter((line) => /internal error|\n\s+at /.test(line))).toEqual([]);
    // Nothing was charged to the lost file, and nothing new was made at its path.
    expect(lostContents(kept)).toEqual(atLoss);
    expect(readdirSync(g.dir).filter((name) => name.startsWith(basename(g.dbPath)))).toEqual([]);
  }, 30_000);

  it("notices a loss at its next commit even when no new request asks (a charge in flight)", async () => {
    gw = await start();
    const g = gw;
    await (await served(g, "before")).json();
    g.services.ledger.flush();
    const kept = keepLinks(g);
    const atLoss = lostContents(kept);
    // Admitted before the loss, answered after it: its charge has nowhere to go.
    const slow = served(g, "slow [[mock:delay=1500]]");
    for (let i = 0; i < 250 && g.services.ledger.heldMicro("acct") === 0; i++) await sleep(20);
    expect(g.services.ledger.heldMicro("acct")).toBeGreaterThan(0);
    unlinkSync(g.dbPath);
    await expectStorage503(await slow, /database file was removed/);
    expect(lostContents(kept)).toEqual(atLoss);
  }, 30_000);
});

describe("the database file replaced while serving", () => {
  it("refuses to write to the file it opened, and never touches the new one", async () => {
    gw = await start();
    const g = gw;
    await (await served(g, "before")).json();
    g.services.ledger.flush();
    const kept = keepLinks(g);
    const atLoss = lostContents(kept);
    // Another database (here a copy of an older backup) moved into place, as a restore does.
    const replacement = join(g.dir, "restored.db");
    writeFileSync(replacement, readFileSync(kept));
    renameSync(replacement, g.dbPath);
    const newBytes = readFileSync(g.dbPath);
    await sleep(100);

    await expectStorage503(await served(g, "after"), /database file was removed/);
    expect(await readiness(g)).toEqual({ status: 503, reason: "storage_unavailable" });
    expect(
      logged.filter((line) => line.includes("was replaced while the gateway was serving")),
    ).toHaveLength(1);
    expect(lostContents(kept)).toEqual(atLoss);
    expect(readFileSync(g.dbPath).equals(newBytes)).toBe(true);
  }, 30_000);
});

describe("a disk that refuses writes (an injected SQLITE_READONLY)", () => {
  it("answers 503 in each style, ends a stream in flight with a storage error event, and recovers", async () => {
    gw = await start();
    const g = gw;
    await (await served(g, "before")).json();
    g.services.ledger.flush();
    const log = () => g.services.store.requestLog("acct", 1e9);
    const rowsBefore = log().length;

    // A slow request holds the ledger's batch open, so the stream's charge waits for a commit.
    const slow = served(g, "slow [[mock:delay=2000]]");
    for (let i = 0; i < 250 && g.services.ledger.heldMicro("acct") === 0; i++) await sleep(20);
    // SQLite refuses every write from here on, as on a filesystem remounted read-only.
    g.services.store.database.pragma("query_only = ON");
    const stream = await post(
      g,
      "/v1/chat/completions",
      chat("stream me", "mock-gpt", { stream: true }),
    );
    expect(stream.status).toBe(200);
    const text = await stream.text();
    expect(text).not.toContain("[DONE]");
    expect(text).toMatch(/"code":"storage_unavailable"/);
    expect(text).toMatch(/its disk refuses writes/);
    const slowAnswer = await slow;
    expect([200, 503]).toContain(slowAnswer.status);
    await slowAnswer.text();

    await expectStorage503(await served(g, "refused"), /its disk refuses writes/);
    const messages = await post(g, "/v1/messages", {
      model: "mock-gpt",
      max_tokens: 20,
      messages: [{ role: "user", content: "refused too" }],
    });
    expect(messages.status).toBe(503);
    expect(await messages.json()).toMatchObject({
      type: "error",
      error: { type: "api_error", message: expect.stringMatching(/refuses writes/) },
    });
    expect(await readiness(g)).toEqual({ status: 503, reason: "storage_unavailable" });
    expect(logged.filter((line) => line.includes(`cannot write ${g.dbPath}`))).toEqual([
      `gateway: cannot write ${g.dbPath}: attempt to write a readonly database; requests get 503 storage_unavailable until the disk takes writes again`,
    ]);
    expect(logged.filter((line) => /internal error|\n\s+at /.test(line))).toEqual([]);

    // The disk takes writes again: readiness notices without a request, then requests are served.
    g.services.store.database.pragma("query_only = OFF");
    await sleep(1_100);
    expect(await readiness(g)).toEqual({ status: 200, reason: undefined });
    const after = await served(g, "writable again");
    expect(after.status).toBe(200);
    await after.json();
    g.services.ledger.flush();
    // The broken stream left no charge; the slow request's row is there only if it answered 200.
    const states = log()
      .reverse()
      .slice(rowsBefore)
      .map(({ stream: s, state }) => ({ stream: s, state }));
    expect(states).toEqual([
      ...(slowAnswer.status === 200 ? [{ stream: 0, state: "settled" }] : []),
      { stream: 0, state: "settled" },
    ]);
  }, 30_000);

  it("ends a Responses stream cut at max_output_tokens with a storage error event, never its response.incomplete", async () => {
    gw = await start();
    const g = gw;
    await (await served(g, "before")).json();
    g.services.ledger.flush();

    // A slow request holds the ledger's batch open, so the stream's charge waits for a commit.
    const slow = served(g, "slow [[mock:delay=2000]]");
    for (let i = 0; i < 250 && g.services.ledger.heldMicro("acct") === 0; i++) await sleep(20);
    g.services.store.database.pragma("query_only = ON");
    // `store: false`: nothing but the charge is written.
    const stream = await post(g, "/v1/responses", {
      model: "mock-gpt",
      input: "[[mock:words=60]] go on",
      max_output_tokens: 16,
      store: false,
      stream: true,
    });
    expect(stream.status).toBe(200);
    const text = await stream.text();
    // The answer got as far as its text, then its charge could not be recorded.
    expect(text).toContain("event: response.output_text.delta");
    expect(text).not.toContain("event: response.incomplete");
    expect(text).toMatch(/"code":"storage_unavailable"/);
    await (await slow).text();
    g.services.store.database.pragma("query_only = OFF");
  }, 30_000);
});

/**
 * The kernel remounting the database's filesystem read-only, as ext4 does on errors: a loop
 * device, root only. Linux keeps such a filesystem read-only until it is unmounted, so recovery
 * is the injected error's test above.
 */
const root = process.getuid?.() === 0;
describe.skipIf(!root)("a filesystem the kernel remounted read-only (root)", () => {
  let mountPoint = "";
  let image = "";
  let mounted = false;
  afterAll(() => {
    if (mounted) {
      try {
        execFileSync("umount", [mountPoint], { stdio: "pipe" });
      } catch {
        execFileSync("umount", ["-l", mountPoint], { stdio: "pipe" });
      }
    }
    if (mountPoint) rmdirSync(mountPoint);
    if (image) rmSync(image, { force: true });
  });

  it("answers 503 storage_unavailable, ends a stream in flight with a storage error event, fails readiness", async (ctx) => {
    const base = mkdtempSync(join(tmpdir(), "gateway-ro-"));
    image = join(base, "disk.img");
    mountPoint = join(base, "mnt");
    mkdirSync(mountPoint);
    let device = "";
    try {
      execFileSync("truncate", ["-s", "32M", image], { stdio: "pipe" });
      execFileSync("mkfs.ext4", ["-q", "-F", image], { stdio: "pipe" });
      execFileSync("mount", ["-o", "loop,errors=remount-ro", image, mountPoint], { stdio: "pipe" });
      mounted = true;
      device = basename(
        execFileSync("findmnt", ["-n", "-o", "SOURCE", mountPoint], { encoding: "utf8" }).trim(),
      );
    } catch (err) {
      ctx.skip(`cannot mount a loop filesystem: ${(err as Error).message.split("\n")[0]}`);
    }
    const trigger = `/sys/fs/ext4/${device}/trigger_fs_error`;
    if (!existsSync(trigger)) ctx.skip(`this kernel has no ${trigger}`);

    gw = await start(join(mountPoint, "gateway.db"));
    const g = gw;
    await (await served(g, "before")).json();
    g.services.ledger.flush();

    const slow = served(g, "slow [[mock:delay=2000]]");
    for (let i = 0; i < 250 && g.services.ledger.heldMicro("acct") === 0; i++) await sleep(20);
    // An ext4 error: the kernel remounts the filesystem read-only (errors=remount-ro).
    writeFileSync(trigger, "gateway test");
    const stream = await post(
      g,
      "/v1/chat/completions",
      chat("stream me", "mock-gpt", { stream: true }),
    );
    const text = await stream.text();
    expect(text).not.toContain("[DONE]");
    expect(text).toMatch(/"code":"storage_unavailable"/);
    await (await slow).text();

    const refused = await served(g, "refused");
    await expectStorage503(refused, /its disk refuses writes/);
    expect(await readiness(g)).toEqual({ status: 503, reason: "storage_unavailable" });
    expect(logged.filter((line) => line.includes(`cannot write ${g.dbPath}`))).toHaveLength(1);
    expect(logged.filter((line) => /internal error|upstream_error|\n\s+at /.test(line))).toEqual(
      [],
    );
  }, 60_000);
});

describe.skipIf(!root)("gateway serve on a read-only filesystem (root)", () => {
  it("refuses to start with one line saying the disk refuses writes, not an unexpected error", async () => {
    const base = mkdtempSync(join(tmpdir(), "gateway-ro-start-"));
    const readOnly = join(base, "ro");
    mkdirSync(readOnly);
    try {
      execFileSync("mount", ["--bind", base, readOnly], { stdio: "pipe" });
    } catch {
      rmSync(base, { recursive: true, force: true });
      return;
    }
    try {
      execFileSync("mount", ["-o", "remount,ro,bind", readOnly], { stdio: "pipe" });
      const db = join(readOnly, "gateway.db");
      const started = await runCli(["serve", "--port", "0", "--db", db], process.env);
      expect(started.code).toBe(1);
      expect(started.stderr.trim()).toBe(
        `gateway: cannot write ${db}: the disk refuses writes (EROFS: read-only file system, open '${db}-lock'); start it on a writable disk`,
      );
    } finally {
      execFileSync("umount", [readOnly], { stdio: "pipe" });
      rmSync(base, { recursive: true, force: true });
    }
  }, 30_000);
});
