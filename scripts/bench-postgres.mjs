// The bench's Postgres side: a throwaway server (test/support/postgres-server.mjs), a gateway on
// it in the bench's process (as the SQLite one is), and gateways as `gateway serve` processes on
// one database, as an operator runs several behind a load balancer. Also what each process spent
// on the CPU, read from /proc, so a row can say what the database cost beside the gateway.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { findPostgresBin, startPostgresServer } from "../test/support/postgres-server.mjs";
import { capCpu } from "./bench-cgroup.mjs";

const gatewayBin = fileURLToPath(new URL("../bin/gateway", import.meta.url));
const secretKeyEnv = "GATEWAY_SECRET_KEY";

/** Why the Postgres rows cannot run here, or undefined when they can. */
export function postgresMissing() {
  try {
    findPostgresBin();
    return undefined;
  } catch (err) {
    return err.message;
  }
}

/**
 * Starts the server. `gateway(options)` runs one gateway in this process; `processes(count,
 * config, cpus)` runs that many `gateway serve` processes sharing one database, each capped at
 * `cpus` cores when given (scripts/bench-cgroup.mjs). Each call has a database of its own, named
 * in its result (`database`); `statements(database)` counts the statements its clients sent.
 * `stop()` ends every gateway, then the server.
 */
export async function startPostgresBench(startGateway, dir) {
  // Every gateway on a database must seal BYOK keys with the same key; any key will do here.
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  // Statements as the clients send them (a function's inner statements are not counted).
  const server = await startPostgresServer([
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=top",
  ]);
  const stats = new pg.Client({ connectionString: server.url() });
  await stats.connect();
  await stats.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
  const stops = [async () => stats.end()];
  let databases = 0;
  const createDatabase = async () => {
    const name = `bench_${++databases}`;
    const admin = new pg.Client({ connectionString: server.url() });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } finally {
      await admin.end();
    }
    return server.url(name);
  };
  return {
    server,
    async gateway(options) {
      const db = await createDatabase();
      const gateway = await startGateway({ ...options, db });
      stops.push(() => gateway.close());
      return Object.assign(gateway, { database: new URL(db).pathname.slice(1) });
    },
    async statements(database) {
      const { rows } = await stats.query(
        `SELECT coalesce(sum(s.calls), 0)::bigint AS calls FROM pg_stat_statements s
           JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`,
        [database],
      );
      return Number(rows[0].calls);
    },
    async processes(count, config, cpus) {
      const db = await createDatabase();
      const file = join(dir, `bench-config-${databases}.json`);
      writeFileSync(file, JSON.stringify(config));
      const started = [];
      // One after the other: each applies the config at its start, and the bench measures serving.
      for (let i = 0; i < count; i++) {
        const gateway = await serveProcess(db, file);
        stops.push(() => gateway.stop());
        if (cpus) capCpu(gateway.pid, cpus, `${databases}-${i}`);
        started.push(gateway);
      }
      return Object.assign(started, { database: new URL(db).pathname.slice(1) });
    },
    async stop() {
      for (const stop of stops.reverse()) await stop().catch(() => {});
      await server.stop();
    },
  };
}

// A serve process does not notice its parent going: one stopped by Ctrl-C or a crash of the bench
// is ended here, by its pid, rather than left serving on a server that is gone.
const serving = new Set();
const endServing = () => {
  for (const child of serving) child.kill("SIGTERM");
};
process.once("exit", endServing);
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    endServing();
    process.exit(130);
  });
}

/**
 * `gateway serve` on `db` (a URL or a SQLite file), resolved with its URL and pid once it prints
 * its ready line.
 * BENCH_SERVE_NODE_ARGS gives its Node flags (`--cpu-prof --cpu-prof-dir=prof`: a profile each).
 */
export function serveProcess(db, configFile) {
  const nodeArgs = process.env.BENCH_SERVE_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const args = [...nodeArgs, gatewayBin, "serve", "--db", db, "--config", configFile];
  args.push("--port", "0", "--json", "--quiet");
  const child = spawn(process.execPath, args, {
    env: process.env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  serving.add(child);
  const exited = new Promise((resolve) => child.once("exit", resolve));
  void exited.then(() => serving.delete(child));
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`gateway serve exited ${code} before ready`)));
    createInterface({ input: child.stdout }).once("line", (line) => {
      const { url } = JSON.parse(line);
      resolve({
        url,
        pid: child.pid,
        async stop() {
          child.kill("SIGTERM");
          await exited;
        },
      });
    });
  });
}

const procFields = (pid) => {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name may hold spaces; the fields after it may not.
  return text.slice(text.lastIndexOf(")") + 2).split(" ");
};
// /proc counts CPU time in USER_HZ ticks, which Linux fixes for every user-space reader.
const userHz = 100;
const ticksToUs = 1_000_000 / userHz;
const hasProc = existsSync("/proc/self/stat");

/** CPU microseconds the process `pid` has used so far, or NaN where /proc is not there. */
export function processCpuUs(pid) {
  if (!hasProc) return Number.NaN;
  const fields = procFields(pid);
  return (Number(fields[11]) + Number(fields[12])) * ticksToUs;
}

/**
 * CPU microseconds the Postgres server whose postmaster is `pid` has used so far: the postmaster,
 * its live backends, and (in the postmaster's children's times) the backends that have ended.
 */
export function postgresCpuUs(pid) {
  if (!hasProc) return Number.NaN;
  let ticks = 0;
  forEachPostgresProcess(pid, (entry, fields) => {
    if (Number(entry) === pid) {
      ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    } else {
      ticks += Number(fields[11]) + Number(fields[12]);
    }
  });
  return ticks * ticksToUs;
}

/** The pids of the Postgres server whose postmaster is `pid`: it and its live backends. */
export function postgresPids(pid) {
  const pids = [];
  if (hasProc) forEachPostgresProcess(pid, (entry) => pids.push(Number(entry)));
  return pids;
}

function forEachPostgresProcess(pid, visit) {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fields;
    try {
      fields = procFields(entry);
    } catch {
      continue; // ended meanwhile
    }
    if (Number(entry) === pid || Number(fields[1]) === pid) visit(entry, fields);
  }
}
