import { readFileSync, statSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { GatewayAlreadyRunning } from "../src/server/backends/already-running.js";
import { startGateway } from "../src/server/gateway.js";
import { readServeRecordOf } from "../src/store/sqlite/serve-record.js";
import { type CliHome, cliHome, killRunningClis, runCli, spawnCli } from "./support/cli.js";
import { baseConfig, chat, KEY } from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

const homes: CliHome[] = [];
const serves: ServeProcess[] = [];
afterEach(async () => {
  killRunningClis();
  for (const s of serves.splice(0)) await s.stop("SIGKILL");
  for (const h of homes.splice(0)) h.remove();
});

function newHome(): CliHome {
  const home = cliHome();
  homes.push(home);
  return home;
}

async function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const s = await serveProcess(args, env);
  serves.push(s);
  return s;
}

async function serveRecord(db: string): Promise<{ pid: number; url: string } | undefined> {
  const record = await readServeRecordOf(db);
  return record && { pid: record.pid, url: record.url };
}

async function chatWith(url: string, key: string): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(chat("hello")),
  });
}

describe("one serve per database", () => {
  it("refuses a second serve on the same file in one line naming the first, and leaves its files alone", async () => {
    const home = newHome();
    const db = `${home.dir}/one.db`;
    const first = await serve(["--db", db]);
    expect((await chatWith(first.url, first.ready.demo_key!)).status).toBe(200);
    const journal = readFileSync(`${db}-settlements`);
    expect(journal.length).toBeGreaterThan(0);
    const record = await serveRecord(db);
    expect(record).toEqual({ pid: first.child.pid, url: first.url });

    const second = await runCli(["serve", "--port", "0", "--db", db], home.env);
    expect(second.code).toBe(1);
    const lines = second.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe(
      `gateway: another gateway (pid ${first.child.pid}, ${first.url}) is serving ${db}; stop it first, or use another database (--db other.db)`,
    );
    expect(second.stdout).toBe("");

    // The first keeps its journal, its record and its money.
    expect(readFileSync(`${db}-settlements`).equals(journal)).toBe(true);
    expect(await serveRecord(db)).toEqual(record);
    expect((await chatWith(first.url, first.ready.demo_key!)).status).toBe(200);
    const link = await runCli(["owner-link", "--db", db, "--json"], home.env);
    expect(link.code, link.stderr).toBe(0);
    expect(JSON.parse(link.stdout).owner_url).toContain(first.url);
  });

  it("lets exactly one of two serves started at once have the file", async () => {
    const home = newHome();
    const db = `${home.dir}/race.db`;
    const a = spawnCli(["serve", "--port", "0", "--json", "--db", db], home.env);
    const b = spawnCli(["serve", "--port", "0", "--json", "--db", db], home.env);
    const outcome = (p: typeof a) =>
      p.waitFor(/"url"|another gateway/, 15_000).then((m) => (m[0] === '"url"' ? "up" : "refused"));
    const results = await Promise.all([outcome(a), outcome(b)]);
    expect(results.sort()).toEqual(["refused", "up"]);
    a.child.kill("SIGTERM");
    b.child.kill("SIGTERM");
    await Promise.all([a.exit(), b.exit()]);
  });

  it("takes over silently from a server that died without cleaning up", async () => {
    const home = newHome();
    const db = `${home.dir}/dead.db`;
    const dead = await serve(["--db", db]);
    await dead.stop("SIGKILL");
    expect((await serveRecord(db))?.pid).toBe(dead.child.pid);

    const next = await serve(["--db", db]);
    expect(await serveRecord(db)).toEqual({ pid: next.child.pid, url: next.url });
    expect(next.ready).not.toHaveProperty("warning");
    expect(statSync(`${db}-lock`).isFile()).toBe(true);
  });

  it("lets an in-memory gateway run beside another", async () => {
    const a = await serve(["--db", ":memory:"]);
    const b = await serve(["--db", ":memory:"]);
    expect(a.url).not.toBe(b.url);
  });

  it("refuses startGateway() on a served file with a typed error, and allows it after close()", async () => {
    const home = newHome();
    const db = `${home.dir}/api.db`;
    const gw = await startGateway({ db, port: 0, config: baseConfig() });
    let refusal: unknown;
    try {
      await startGateway({ db, port: 0 });
    } catch (err) {
      refusal = err;
    }
    expect(refusal).toBeInstanceOf(GatewayAlreadyRunning);
    expect((refusal as GatewayAlreadyRunning).running).toEqual({ pid: process.pid, url: gw.url });
    expect((refusal as Error).message).toContain(`(pid ${process.pid}, ${gw.url})`);
    expect((await chatWith(gw.url, KEY)).status).toBe(200);
    await gw.close();

    const again = await startGateway({ db, port: 0 });
    expect((await chatWith(again.url, KEY)).status).toBe(200);
    await again.close();
  });
});

describe("a key for an existing database", () => {
  it("serve on an existing database says how to get a key; keys create --db mints one the running serve accepts", async () => {
    const home = newHome();
    const db = `${home.dir}/again.db`;
    const first = await serve(["--db", db]);
    await first.stop("SIGTERM");

    const human = spawnCli(["serve", "--port", "0", "--db", db], home.env);
    const [, url] = await human.waitFor(/listening on (http:\/\/\S+)/);
    await human.waitFor(/none is shown again/);
    expect(human.stdout()).toContain(
      `keys are stored only as hashes, so none is shown again; a new one: npx gateway keys create --db ${db} --label NAME`,
    );
    expect(human.stdout()).not.toMatch(/kn-/);

    const made = await runCli(["keys", "create", "--db", db, "--label", "laptop"], home.env);
    expect(made.code, made.stderr).toBe(0);
    const key = made.stdout.trim();
    expect(key).toMatch(/^kn-[A-Za-z0-9_-]{40,}$/);
    expect(made.stderr).toContain('"laptop"');
    expect((await chatWith(url, key)).status).toBe(200);

    const json = await runCli(["keys", "create", "--db", db, "--json"], home.env);
    expect(json.code, json.stderr).toBe(0);
    const created = JSON.parse(json.stdout) as { key: string; label: string; account_id: string };
    expect(created).toMatchObject({ label: "cli", account_id: "demo" });
    expect((await chatWith(url, created.key)).status).toBe(200);
    human.child.kill("SIGTERM");
    expect((await human.exit()).code).toBe(0);
  });

  it("keys create --db works with no serve running, for a named account, and refuses what it cannot do", async () => {
    const home = newHome();
    const db = `${home.dir}/offline.db`;
    const config = `${home.dir}/config.json`;
    const { writeFileSync } = await import("node:fs");
    writeFileSync(config, JSON.stringify(baseConfig()));
    const setup = await serve(["--db", db, "--config", config]);
    await setup.stop("SIGTERM");

    const made = await runCli(
      ["keys", "create", "--db", db, "--account", "poor", "--label", "p", "--json"],
      home.env,
    );
    expect(made.code, made.stderr).toBe(0);
    const created = JSON.parse(made.stdout) as { key: string; account_id: string };
    expect(created.account_id).toBe("poor");

    const later = await serve(["--db", db]);
    // The poor account has no money: the key is its, so the answer is a 402, not a 401.
    expect((await chatWith(later.url, created.key)).status).toBe(402);

    const unknown = await runCli(["keys", "create", "--db", db, "--account", "nobody"], home.env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr.trim()).toBe(
      `gateway: no account "nobody" in ${db}; its accounts: acct, poor`,
    );
    const missing = await runCli(["keys", "create", "--db", `${home.dir}/none.db`], home.env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`no database at ${home.dir}/none.db`);
    const noLabel = await runCli(["keys", "create"], home.env);
    expect(noLabel.code).toBe(2);
    expect(noLabel.stderr).toContain("--label is required");
  });
});
