import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { balanceOnDisk, requestLogOnDisk } from "./support/database-file.js";
import { baseConfig, chat, KEY } from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-crash-"));
const running: ServeProcess[] = [];
afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

const initialMicro = 1_000_000 * 1_000_000;

/** What the file holds, read by a connection of its own: a fresh process's view. */
function ledgerState(dbPath: string) {
  const log = requestLogOnDisk(dbPath);
  const byState: Record<string, { state: string; n: number; cost: number; held: number }> = {};
  for (const row of log) {
    byState[row.state] ??= { state: row.state, n: 0, cost: 0, held: 0 };
    const counted = byState[row.state];
    counted.n++;
    counted.cost += row.cost_micro;
    counted.held += row.reserved_micro;
  }
  return {
    balance: balanceOnDisk(dbPath, "acct"),
    settledStreams: log.filter((row) => row.state === "settled" && row.stream === 1).length,
    byState,
  };
}

describe("a crash in the middle of load", () => {
  it("loses nothing and charges nothing twice: after SIGKILL and restart, the log and the balance agree", async () => {
    const dbPath = join(dir, "gateway.db");
    const configPath = join(dir, "config.json");
    writeFileSync(configPath, JSON.stringify(baseConfig()));
    const first = await serveProcess(["--db", dbPath, "--config", configPath]);
    running.push(first);
    const send = (content: string) =>
      fetch(`${first.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify(chat(content)),
      }).then(
        (r) => r.status,
        () => "dropped",
      );
    // A stream counts as finished for its client when its closing event arrived.
    const stream = (path: string, body: object, closing: string) =>
      fetch(`${first.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ ...body, stream: true }),
      }).then(
        async (r) => (r.status === 200 && (await r.text()).includes(closing) ? 200 : r.status),
        () => "dropped",
      );
    // Slow requests hold money when the process dies; loops of fast ones keep settling.
    const slow = Array.from({ length: 10 }, (_, i) => send(`slow ${i} [[mock:delay=5000]]`));
    let answered = 0;
    let streamed = 0;
    let stopped = false;
    const loop = async (one: (i: number) => Promise<number | string>, counted: () => void) => {
      for (let i = 0; !stopped; i++) {
        const status = await one(i).catch(() => "dropped");
        if (status === 200) counted();
        else if (status === "dropped") return;
      }
    };
    const loops = [
      ...Array.from({ length: 6 }, (_, n) =>
        loop(
          (i) => send(`fast ${n}.${i}`),
          () => answered++,
        ),
      ),
      ...Array.from({ length: 3 }, (_, n) =>
        loop(
          (i) => stream("/v1/chat/completions", chat(`stream ${n}.${i}`), "data: [DONE]"),
          () => streamed++,
        ),
      ),
      ...Array.from({ length: 3 }, (_, n) =>
        loop(
          (i) =>
            stream(
              "/v1/messages",
              { ...chat(`messages ${n}.${i}`), max_tokens: 64 },
              "event: message_stop",
            ),
          () => streamed++,
        ),
      ),
    ];
    // Killed under way: once both kinds have finished some (a loaded machine may take a while).
    const under = Date.now() + 10_000;
    do await new Promise((r) => setTimeout(r, 500));
    while ((answered === 0 || streamed === 0) && Date.now() < under);
    await first.stop("SIGKILL");
    stopped = true;
    await Promise.all(loops);
    expect((await Promise.all(slow)).every((s) => s === "dropped")).toBe(true);
    expect(answered).toBeGreaterThan(0);
    expect(streamed).toBeGreaterThan(0);

    const dead = ledgerState(dbPath);
    // Every answer a client received was committed with its charge before it was sent, and every
    // stream whose closing event arrived was committed before that event left.
    expect(dead.byState.settled.n).toBeGreaterThanOrEqual(answered + streamed);
    expect(dead.settledStreams).toBeGreaterThanOrEqual(streamed);
    expect(dead.byState.reserved).toBeUndefined();
    expect(dead.balance + dead.byState.settled.cost).toBe(initialMicro);

    const second = await serveProcess(["--db", dbPath, "--config", configPath]);
    running.push(second);
    const after = ledgerState(dbPath);
    // The start added nothing but the streams the crash cut off midway (at most one a stream
    // loop), each charged by its delivery mark: what reached its client at least.
    const cut = after.byState.interrupted ?? { n: 0, cost: 0 };
    expect(after.byState.settled).toEqual(dead.byState.settled);
    expect(after.settledStreams).toBe(dead.settledStreams);
    expect(cut.n).toBeLessThanOrEqual(6);
    expect(
      requestLogOnDisk(dbPath)
        .filter((row) => row.state === "interrupted")
        .every((row) => row.stream === 1 && row.cost_micro > 0),
    ).toBe(true);
    expect(after.balance + cut.cost).toBe(dead.balance);

    // The unchanged config did not reset the balance spent before the crash, and billing goes on.
    const quota = async () => {
      const res = await fetch(`${second.url}/v1/account/quota`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      return Math.round(((await res.json()) as { balance_idr: number }).balance_idr * 1_000_000);
    };
    expect(await quota()).toBe(after.balance);
    const res = await fetch(`${second.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(chat("after the crash")),
    });
    expect(res.status).toBe(200);
    expect(await quota()).toBeLessThan(after.balance);
    await second.stop();
    const final = ledgerState(dbPath);
    expect(final.balance + final.byState.settled.cost + cut.cost).toBe(initialMicro);
  });
});
