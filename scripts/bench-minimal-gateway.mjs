// A second floor for the benchmark: the least a gateway can do per request and still bill it.
// Hand-written on node:http with no framework, it hashes the key, parses the body, holds the worst
// case in memory, calls the upstream through pooled undici, reads the usage and commits the charge
// and a request-log row to SQLite (WAL, one transaction) before it answers, as the gateway does.
// It has no limits, routes, translation, streams or error mapping. The gateway's row minus this
// one is what the gateway's structure costs beyond that work.
import { hash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { Agent } from "undici";

export async function startMinimalGateway(upstreamUrl, key) {
  const dir = mkdtempSync(join(tmpdir(), "gateway-minimal-"));
  const db = new Database(join(dir, "minimal.db"));
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.exec(`
    CREATE TABLE accounts (id TEXT PRIMARY KEY, balance_micro INTEGER NOT NULL);
    CREATE TABLE request_log (id TEXT NOT NULL, account_id TEXT NOT NULL, model TEXT NOT NULL,
      cost_micro INTEGER NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
      status INTEGER NOT NULL, created_at INTEGER NOT NULL, finished_at INTEGER NOT NULL);
    CREATE INDEX request_log_account_time ON request_log(account_id, created_at);
    INSERT INTO accounts VALUES ('bench', 1000000000000000000);`);
  const charge = db.prepare("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?");
  const log = db.prepare("INSERT INTO request_log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  const settle = db.transaction((id, cost, usage, createdAt) => {
    charge.run(cost, "bench");
    log.run(
      id,
      "bench",
      "bench-model",
      cost,
      usage.prompt_tokens,
      usage.completion_tokens,
      200,
      createdAt,
      Date.now(),
    );
  });

  const keys = new Map([[hash("sha256", key, "hex"), "bench"]]);
  const model = { upstream: "bench-upstream", input: 1_000, output: 2_000, maxOutput: 4_096 };
  const account = { balance: 1e18, held: 0 };
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
  const origin = new URL(upstreamUrl).origin;

  const refuse = (res, status) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(`{"error":{"code":${status}}}`);
  };
  const callUpstream = (body) =>
    new Promise((resolve, reject) => {
      const chunks = [];
      agent.dispatch(
        {
          origin,
          path: "/v1/chat/completions",
          method: "POST",
          headers: {
            "content-type": "application/json",
            authorization: "Bearer sk-bench-upstream",
          },
          body,
          headersTimeout: 300_000,
          bodyTimeout: 300_000,
        },
        {
          onRequestStart: () => {},
          onResponseData: (_c, chunk) => chunks.push(chunk),
          onResponseEnd: () => resolve(Buffer.concat(chunks).toString("utf8")),
          onResponseError: (_c, err) => reject(err),
        },
      );
    });

  const server = createServer((req, res) => {
    const parts = [];
    req.on("data", (part) => parts.push(part));
    req.on("end", async () => {
      const presented = req.headers.authorization?.slice("Bearer ".length) ?? "";
      if (!keys.has(hash("sha256", presented, "hex"))) return refuse(res, 401);
      const text = Buffer.concat(parts).toString("utf8");
      let body;
      try {
        body = JSON.parse(text);
      } catch {
        return refuse(res, 400);
      }
      if (body.model !== "bench-model" || !Array.isArray(body.messages)) return refuse(res, 400);
      const hold =
        (text.length >> 1) * model.input + (body.max_tokens ?? model.maxOutput) * model.output;
      if (account.balance - account.held < hold) return refuse(res, 402);
      account.held += hold;
      const createdAt = Date.now();
      let answer;
      try {
        answer = JSON.parse(await callUpstream(JSON.stringify({ ...body, model: model.upstream })));
      } catch {
        account.held -= hold;
        return refuse(res, 503);
      }
      const usage = answer.usage;
      const cost = Math.min(
        hold,
        usage.prompt_tokens * model.input + usage.completion_tokens * model.output,
      );
      account.held -= hold;
      account.balance -= cost;
      const id = `req_${randomBytes(12).toString("hex")}`;
      settle(id, cost, usage, createdAt);
      answer.model = body.model;
      const out = JSON.stringify(answer);
      res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(out),
      });
      res.end(out);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await agent.close();
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
