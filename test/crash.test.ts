import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { baseConfig, chat, KEY } from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-crash-"));
const running: ServeProcess[] = [];
afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

const initialMicro = 1_000_000 * 1_000_000;

function ledgerState(dbPath: string) {
  const db = new Database(dbPath, { readonly: true });
  try {
    const balance = (
      db.prepare("SELECT balance_micro FROM accounts WHERE id = 'acct'").get() as {
        balance_micro: number;
      }
    ).balance_micro;
    const rows = db
      .prepare(
        "SELECT state, count(*) AS n, sum(cost_micro) AS cost, sum(reserved_micro) AS held FROM request_log GROUP BY state",
      )
      .all() as {
      state: string;
      n: number;
      cost: number;
      held: number;
    }[];
    return { balance, byState: Object.fromEntries(rows.map((r) => [r.state, r])) };
  } finally {
    db.close();
  }
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
    // Slow requests hold money when the process dies; eight loops of fast ones keep settling.
    const slow = Array.from({ length: 10 }, (_, i) => send(`slow ${i} [[mock:delay=5000]]`));
    let answered = 0;
    let stopped = false;
    const loops = Array.from({ length: 8 }, async (_, loop) => {
      for (let i = 0; !stopped; i++) {
        const status = await send(`fast ${loop}.${i}`);
        if (status === 200) answered++;
        else if (status === "dropped") return;
      }
    });
    await new Promise((r) => setTimeout(r, 500));
    await first.stop("SIGKILL");
    stopped = true;
    await Promise.all(loops);
    expect((await Promise.all(slow)).every((s) => s === "dropped")).toBe(true);
    expect(answered).toBeGreaterThan(0);

    const dead = ledgerState(dbPath);
    // Every answer a client received was committed with its charge before it was sent.
    expect(dead.byState.settled.n).toBeGreaterThanOrEqual(answered);
    expect(dead.byState.reserved).toBeUndefined();
    expect(dead.balance + dead.byState.settled.cost).toBe(initialMicro);

    const second = await serveProcess(["--db", dbPath, "--config", configPath]);
    running.push(second);
    const after = ledgerState(dbPath);
    expect(after).toEqual(dead);

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
    expect(final.balance + final.byState.settled.cost).toBe(initialMicro);
  });
});
