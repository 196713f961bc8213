// Which PostgreSQL client the gateway's Postgres store uses, measured: node-postgres (`pg`) and
// postgres.js (`postgres`) against a throwaway local server, on the statement shape of a money
// hold (a one-row conditional UPDATE ... RETURNING).
//
//   node scripts/bench-pg-clients.mjs [--ops 4000] [--json]
//
// Both clients must be installed to run it (`npm install --no-save postgres` for the one the
// package does not depend on). Rows: round trip at one connection (p50, p99), requests/s for
// concurrent callers sharing a pool of connections, and the same with pipelining where the
// client has it (node-postgres: `pipeline: true` clients shared round-robin; postgres.js
// pipelines on its own once every connection is busy).
import { parseArgs } from "node:util";
import { startPostgresServer } from "../test/support/postgres-server.mjs";

const { values } = parseArgs({
  options: {
    ops: { type: "string", default: "4000" },
    callers: { type: "string", default: "50" },
    pool: { type: "string", default: "10" },
    json: { type: "boolean", default: false },
  },
});
const ops = Number(values.ops);
const callers = Number(values.callers);
const poolSize = Number(values.pool);
const accounts = 1000;

const hold = `UPDATE bench_accounts SET held_micro = held_micro + $2
  WHERE id = $1 AND balance_micro - held_micro >= $2 RETURNING held_micro`;

async function load(name) {
  try {
    return await import(name);
  } catch {
    return null;
  }
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))];
}

/** Sequential round trips on one connection. */
async function latency(call) {
  for (let i = 0; i < 300; i++) await call(`a${i % accounts}`);
  const times = [];
  for (let i = 0; i < ops; i++) {
    const start = process.hrtime.bigint();
    await call(`a${i % accounts}`);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p99: percentile(times, 99) };
}

/** `callers` loops sharing the pool, each on its own accounts (no row contention), or one row. */
async function throughput(call, sameRow = false) {
  const perCaller = Math.ceil((ops * 2) / callers);
  const run = async (worker, count) => {
    for (let i = 0; i < count; i++) {
      await call(sameRow ? "a0" : `a${(worker * perCaller + i) % accounts}`);
    }
  };
  await Promise.all(Array.from({ length: callers }, (_, worker) => run(worker, 10)));
  const start = performance.now();
  await Promise.all(Array.from({ length: callers }, (_, worker) => run(worker, perCaller)));
  return (callers * perCaller) / ((performance.now() - start) / 1000);
}

async function benchPg(pg, url) {
  const { Client, Pool } = pg.default ?? pg;
  const rows = [];
  const single = new Client({ connectionString: url });
  await single.connect();
  rows.push({
    client: "pg, unnamed statement",
    ...(await latency((id) => single.query(hold, [id, 1]))),
  });
  rows.push({
    client: "pg, prepared (named)",
    ...(await latency((id) => single.query({ name: "hold", text: hold, values: [id, 1] }))),
  });
  await single.end();

  const pool = new Pool({ connectionString: url, max: poolSize });
  const named = (id) => pool.query({ name: "hold", text: hold, values: [id, 1] });
  rows[1].rps = await throughput(named);
  rows[1].rpsOneRow = await throughput(named, true);
  rows[0].rps = await throughput((id) => pool.query(hold, [id, 1]));
  await pool.end();

  const shared = await Promise.all(
    Array.from({ length: poolSize }, async () => {
      const client = new Client({ connectionString: url, pipeline: true });
      await client.connect();
      return client;
    }),
  );
  let next = 0;
  const pipelined = (id) => {
    next = (next + 1) % shared.length;
    return shared[next].query({ name: "hold", text: hold, values: [id, 1] });
  };
  const row = { client: "pg, pipeline: true (shared clients)", p50: null, p99: null };
  row.rps = await throughput(pipelined);
  row.rpsOneRow = await throughput(pipelined, true);
  rows.push(row);
  await Promise.all(shared.map((client) => client.end()));
  return rows;
}

async function benchPostgresJs(postgres, url) {
  const connect = postgres.default ?? postgres;
  const rows = [];
  const single = connect(url, { max: 1, onnotice: () => {} });
  rows.push({
    client: "postgres.js (prepared, auto)",
    ...(await latency((id) => single.unsafe(hold, [id, 1], { prepare: true }))),
  });
  await single.end();
  const pool = connect(url, { max: poolSize, onnotice: () => {} });
  const call = (id) => pool.unsafe(hold, [id, 1], { prepare: true });
  rows[0].rps = await throughput(call);
  rows[0].rpsOneRow = await throughput(call, true);
  await pool.end();
  return rows;
}

const pg = await load("pg");
const postgres = await load("postgres");
if (!pg && !postgres) throw new Error("neither pg nor postgres is installed");

const server = await startPostgresServer();
try {
  const setup = pg ? new (pg.default ?? pg).Client({ connectionString: server.url() }) : null;
  const sql = postgres && !setup ? (postgres.default ?? postgres)(server.url(), { max: 1 }) : null;
  const exec = async (text) => (setup ? setup.query(text) : sql.unsafe(text));
  if (setup) await setup.connect();
  await exec(`CREATE TABLE bench_accounts (
    id text PRIMARY KEY, balance_micro bigint NOT NULL, held_micro bigint NOT NULL DEFAULT 0)`);
  await exec(`INSERT INTO bench_accounts (id, balance_micro)
    SELECT 'a' || n, 9000000000000 FROM generate_series(0, ${accounts - 1}) AS n`);
  if (setup) await setup.end();
  else await sql.end();

  const rows = [];
  if (pg) rows.push(...(await benchPg(pg, server.url())));
  else console.error("pg is not installed: its rows are left out");
  if (postgres) rows.push(...(await benchPostgresJs(postgres, server.url())));
  else console.error("postgres (postgres.js) is not installed: its rows are left out");

  if (values.json) {
    console.log(JSON.stringify({ ops, callers, pool: poolSize, rows }, null, 2));
  } else {
    const ms = (value) => (value === null || value === undefined ? "-" : value.toFixed(3));
    const rps = (value) => (value === undefined ? "-" : Math.round(value).toString());
    console.log(
      `one-row conditional UPDATE ... RETURNING, ${ops} sequential round trips at one connection;` +
        ` ${callers} callers on ${poolSize} connections (own rows, then all on one row)`,
    );
    console.log("client                                 p50 ms   p99 ms   req/s   req/s one row");
    for (const row of rows) {
      console.log(
        `${row.client.padEnd(38)} ${ms(row.p50).padStart(7)}  ${ms(row.p99).padStart(7)}` +
          `  ${rps(row.rps).padStart(6)}  ${rps(row.rpsOneRow).padStart(6)}`,
      );
    }
  }
} finally {
  await server.stop();
}
