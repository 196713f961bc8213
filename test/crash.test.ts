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
    const fast = await Promise.all(Array.from({ length: 20 }, (_, i) => send(`fast ${i}`)));
    expect(fast.every((s) => s === 200)).toBe(true);
    // Slow requests hold money when the process dies.
    const slow = Array.from({ length: 20 }, (_, i) => send(`slow ${i} [[mock:delay=5000]]`));
    await new Promise((r) => setTimeout(r, 400));
    await first.stop("SIGKILL");
    expect((await Promise.all(slow)).every((s) => s === "dropped")).toBe(true);

    const dead = ledgerState(dbPath);
    expect(dead.byState.reserved.n).toBe(20);
    expect(dead.balance + dead.byState.reserved.held + dead.byState.settled.cost).toBe(
      initialMicro,
    );

    const second = await serveProcess(["--db", dbPath, "--config", configPath]);
    running.push(second);
    const after = ledgerState(dbPath);
    expect(after.byState.reserved).toBeUndefined();
    expect(after.byState.interrupted.n).toBe(20);
    expect(after.byState.interrupted.cost).toBe(0);
    expect(after.byState.settled.n).toBe(20);
    expect(after.balance + after.byState.settled.cost).toBe(initialMicro);

    // The unchanged config did not reset the balance spent before the crash, and the restarted gateway bills on.
    const res = await fetch(`${second.url}/v1/account/quota`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(
      Math.round(((await res.json()) as { balance_idr: number }).balance_idr * 1_000_000),
    ).toBe(after.balance);
    await second.stop();
  });
});
