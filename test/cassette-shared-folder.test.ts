import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type OpenAI from "openai";
import { describe, expect, it, vi } from "vitest";
import { type CassetteOptions, ConfigError, startGateway } from "../src/index.js";
import { useCassetteSuite } from "./support/cassette-suite.js";
import { spawnCli, spawnNode } from "./support/cli.js";
import { deferred, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";

/**
 * A suite whose gateways share one cassette folder: two recording the same new request at once,
 * and the lock that keeps a `record` alone, which must not outlive the gateways that held it.
 */

const KEY = "kn-shared-folder-key-000000000000000";

let root: string;
let upstream: FakeUpstream;
const { config, start, closeStarted, client } = useCassetteSuite(
  { key: KEY, providerKey: "sk-up-shared-folder" },
  (started) => {
    ({ root, upstream } = started);
  },
);

async function gateway(cassettes: CassetteOptions) {
  const gw = await start(cassettes);
  return { gw, openai: client(gw) };
}

const question = { model: "app-chat", messages: [{ role: "user" as const, content: "Pick one" }] };
const ask = async (openai: OpenAI) =>
  (await openai.chat.completions.create(question)).choices[0].message.content;

/** The lock of a cassette folder, as the docs place it: the temporary directory, by real path. */
const lockOf = (dir: string) =>
  join(
    tmpdir(),
    `model-gateway-folder-${createHash("sha256").update(realpathSync(dir)).digest("hex").slice(0, 32)}.locks`,
  );

describe("two record-missing gateways sending the same new request at once", () => {
  it("one file is written whole, the first answer's; the other gateway then replays it, as the offline replay does", async () => {
    const dir = join(root, "at-once");
    const first = await gateway({ dir, mode: "record-missing" });
    const second = await gateway({ dir, mode: "record-missing" });
    // Both calls reach the provider before either is answered; the first is answered first.
    const bothArrived = deferred();
    const firstAnswered = deferred();
    let calls = 0;
    upstream.reset(async () => {
      const call = ++calls;
      if (call === 2) bothArrived.resolve();
      if (call === 1) {
        await bothArrived.promise;
        return openaiJson("the first answer", { usage: [5, 3] });
      }
      await firstAnswered.promise;
      return openaiJson("the second answer", { usage: [5, 3] });
    });
    const one = ask(first.openai);
    const other = ask(second.openai);
    expect(await one).toBe("the first answer");
    firstAnswered.resolve();
    // Each client gets what its provider said.
    expect(await other).toBe("the second answer");

    const files = readdirSync(dir);
    expect(files).toHaveLength(1);
    const kept = JSON.parse(readFileSync(join(dir, files[0]), "utf8")) as {
      response: { body: { choices: { message: { content: string } }[] } };
    };
    expect(kept.response.body.choices[0].message.content).toBe("the first answer");
    // The second gateway answers its next sending from the file, not from what it was told.
    expect(await ask(second.openai)).toBe("the first answer");
    expect(calls).toBe(2);

    await closeStarted();
    const replay = await gateway({ dir, mode: "replay" });
    expect(await ask(replay.openai)).toBe("the first answer");
  });
});

describe("the folder's lock", () => {
  it("goes when the last gateway that records the folder closes, and not before", async () => {
    upstream.reset(() => openaiJson("fine", { usage: [5, 1] }));
    const dir = join(root, "closed");
    const first = await gateway({ dir, mode: "record-missing" });
    const second = await gateway({ dir, mode: "record-missing" });
    expect(await ask(first.openai)).toBe("fine");
    expect(existsSync(lockOf(dir))).toBe(true);
    await first.gw.close();
    // The second still records: a record started now would remove what it writes.
    expect(existsSync(lockOf(dir))).toBe(true);
    await expect(gateway({ dir, mode: "record" })).rejects.toBeInstanceOf(ConfigError);
    await second.gw.close();
    expect(existsSync(lockOf(dir))).toBe(false);

    // A recording alone, and a start refused beside it, which leaves the holder's file alone.
    const recording = await gateway({ dir, mode: "record" });
    await expect(gateway({ dir, mode: "record-missing" })).rejects.toBeInstanceOf(ConfigError);
    expect(existsSync(lockOf(dir))).toBe(true);
    await recording.gw.close();
    expect(existsSync(lockOf(dir))).toBe(false);
  });

  it("a serve killed while recording leaves its lock; the next gateway takes it over, says so in a line naming the pid, and removes it on close", async () => {
    const dir = join(root, "killed");
    const configFile = join(root, "killed.json");
    writeFileSync(configFile, JSON.stringify(config(upstream.baseUrl)));
    const killed = spawnCli(
      [
        "serve",
        "--port",
        "0",
        "--json",
        "--db",
        ":memory:",
        "--config",
        configFile,
        "--replay",
        dir,
        "--record-missing",
      ],
      process.env,
    );
    await killed.waitFor(/^\{.*\}$/m, 25_000);
    expect(existsSync(lockOf(dir))).toBe(true);
    const pid = killed.child.pid;
    killed.child.kill("SIGKILL");
    await killed.exit(20_000);
    // The kernel let go of its lock; its file stays.
    expect(existsSync(lockOf(dir))).toBe(true);

    const said: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      said.push(args.join(" "));
    });
    let recording: Awaited<ReturnType<typeof gateway>>;
    try {
      recording = await gateway({ dir, mode: "record" });
    } finally {
      spy.mockRestore();
    }
    expect(said).toEqual([
      `cassettes: ${dir}: the lock of a gateway that is gone (pid ${pid}, stopped without letting go of it) was taken over: ${lockOf(dir)}`,
    ]);
    expect(existsSync(lockOf(dir))).toBe(true);
    await recording.gw.close();
    expect(existsSync(lockOf(dir))).toBe(false);
  }, 60_000);
});

describe("the folder's lock between processes", () => {
  const holderScript = join(import.meta.dirname, "support", "folder-lock-holder.mjs");
  /** A process holding the lock as a gateway does (`support/folder-lock-holder.mjs`). */
  const holder = (...args: string[]) => spawnNode([holderScript, ...args], process.env);
  const firstLine = async (process: ReturnType<typeof holder>) =>
    JSON.parse((await process.waitFor(/^\{.*\}$/m, 20_000))[0]) as Record<string, unknown>;
  const folder = (name: string) => {
    const dir = join(root, name);
    mkdirSync(dir);
    return dir;
  };

  it("two holders letting go at the same instant leave nothing: the lock goes with the last of them, every round", async () => {
    const dir = folder("two-at-once");
    const sync = folder("two-at-once-sync");
    // Many rounds: two releases meet at the instant that matters only now and then.
    const rounds = "2000";
    const [a, b] = [
      holder("rounds", dir, sync, "a", "b", rounds),
      holder("rounds", dir, sync, "b", "a", rounds),
    ];
    const done = await Promise.all([a.exit(60_000), b.exit(60_000)]);
    for (const { code, stdout, stderr } of done) {
      expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
      expect(JSON.parse(stdout)).toMatchObject({ refused: 0, left: [] });
    }
    expect(existsSync(lockOf(dir))).toBe(false);
  }, 90_000);

  it("names each holder's pid while it holds the folder; a live holder's lock is never taken over", async () => {
    const dir = folder("live-holder");
    const recording = holder("hold", dir, "exclusive");
    const { pid, held } = await firstLine(recording);
    expect(held).toBe(true);
    expect(readdirSync(lockOf(dir)).map((name) => Number(name.split("-")[0]))).toEqual([pid]);
    const other = holder("hold", dir, "shared");
    expect((await firstLine(other)).held).toBe(false);
    const refused = await other.exit();
    expect(refused.stderr).toBe("");
    recording.child.kill("SIGTERM");
    expect((await recording.exit()).code).toBe(0);
    expect(existsSync(lockOf(dir))).toBe(false);
  }, 60_000);

  it("a holder killed without letting go: of two that start at once, both hold the folder, and the take-over is said once, naming its pid", async () => {
    const dir = folder("killed-holder");
    const killed = holder("hold", dir, "exclusive");
    const { pid } = await firstLine(killed);
    killed.child.kill("SIGKILL");
    await killed.exit();
    expect(existsSync(lockOf(dir))).toBe(true);

    const takers = [holder("hold", dir, "shared"), holder("hold", dir, "shared")];
    for (const taker of takers) expect((await firstLine(taker)).held).toBe(true);
    const said = takers.map((taker) => taker.stderr()).join("");
    expect(said).toBe(
      `cassettes: ${dir}: the lock of a gateway that is gone (pid ${pid}, stopped without letting go of it) was taken over: ${lockOf(dir)}\n`,
    );
    expect(
      readdirSync(lockOf(dir))
        .map((name) => Number(name.split("-")[0]))
        .sort(),
    ).toEqual(takers.map((taker) => taker.child.pid).sort());
    for (const taker of takers) taker.child.kill("SIGTERM");
    for (const taker of takers) expect((await taker.exit()).code).toBe(0);
    expect(existsSync(lockOf(dir))).toBe(false);
  }, 60_000);

  it("a start refused after it took the folder lets go of it: the next recording of the folder starts", async () => {
    const dir = folder("refused-start");
    const db = join(root, "refused-start.db");
    const first = await startGateway({ db, config: config(upstream.baseUrl) });
    await first.close();
    // The same key under another id: refused once the database is open, after the folder was taken.
    const moved = config(upstream.baseUrl);
    moved.accounts = [{ id: "app", balance_idr: 100_000, keys: [{ id: "moved", value: KEY }] }];
    await expect(
      startGateway({ db, config: moved, cassettes: { dir, mode: "record" } }),
    ).rejects.toBeInstanceOf(ConfigError);
    expect(existsSync(lockOf(dir))).toBe(false);
    const recording = await gateway({ dir, mode: "record" });
    expect(existsSync(lockOf(dir))).toBe(true);
    await recording.gw.close();
    expect(existsSync(lockOf(dir))).toBe(false);
  });
});
