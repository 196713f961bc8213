// Benchmark: the gateway's full request path (auth, limits, billing reservation and settlement,
// request log, dispatch) against a fake OpenAI-compatible upstream on loopback.
//
//   npm run bench                       build, then run every scenario (3 s of warm-up, 5 s measured)
//   node scripts/bench.mjs --inline     load generator in the gateway's process, for comparison
//   BENCH_SECONDS=2 node scripts/bench.mjs
//   node --cpu-prof --cpu-prof-dir=prof scripts/bench.mjs --only=gw-50
//   node scripts/bench.mjs --stages       also the median time between steps at one connection
//   BENCH_REQUEST_LINES=text node scripts/bench.mjs   with serve's line per request (to stderr)
//   BENCH_METRICS=off node scripts/bench.mjs           without /metrics and its counting
//   node scripts/bench.mjs --only=up-1,gw-1,gw-pg-1,gw-50,gw-pg-50,gw-pg2-50   SQLite beside Postgres
//   node scripts/bench.mjs --only=pair-1        Postgres beside SQLite, requests alternating
//   BENCH_SERVE_NODE_ARGS="--cpu-prof --cpu-prof-dir=prof"   Node flags of the `gateway serve` rows
//
// Two floors run beside the gateway in the same process: a bare proxy (HTTP in and out) and a
// minimal gateway (scripts/bench-minimal-gateway.mjs: the billing work with no structure).
// The fake upstream always runs in a child process. The load generator runs in a child process by
// default: on a 2-core machine that is the fairer number (the gateway keeps one core to itself).
//
// The Postgres rows run last, on a throwaway server the bench starts (and skips, with a note,
// where no Postgres binaries are found): a gateway on it in this process, as the SQLite one, then
// `gateway serve` processes, one and then two on one database with the connections dealt out over
// both. Their `db CPU` is the server's (every Postgres process) per request.
import { fork } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startGateway } from "../dist/index.js";
import { startBareProxy } from "./bench-bare-proxy.mjs";
import { cgroupMissing, favourCpu, releaseCgroups } from "./bench-cgroup.mjs";
import { benchBody, benchConfig, benchHeaders, benchKey } from "./bench-config.mjs";
import { runLoad } from "./bench-load.mjs";
import { startMinimalGateway } from "./bench-minimal-gateway.mjs";
import {
  postgresCpuUs,
  postgresMissing,
  postgresPids,
  processCpuUs,
  serveProcess,
  startPostgresBench,
} from "./bench-postgres.mjs";
import { collectStages } from "./bench-stages.mjs";
import { pacedEvents } from "./bench-upstream.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const inline = process.argv.includes("--inline");
const stagesWanted = process.argv.includes("--stages");
const only = process.argv
  .find((a) => a.startsWith("--only="))
  ?.slice("--only=".length)
  .split(",");
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const durationMs = seconds * 1000;
// Each row warms up first (BENCH_WARMUP_MS): at one connection the per-request code of a fresh
// gateway, and of the bare proxy alike, takes seconds to reach the JIT's optimised tier, and a row
// measured before that compares two warm-ups (docs/performance.md).
const warmupMs = Number(process.env.BENCH_WARMUP_MS ?? 3000);
const alternateWarmupMs = 3000;
const blockMs = Number(process.env.BENCH_BLOCK_MS ?? 1000);
const blockRounds = Number(process.env.BENCH_BLOCK_ROUNDS ?? 6);
// The CPU quota of each gateway in the quota rows: small enough that the gateways, not the load
// generator, the upstream or Postgres sharing the machine, are what runs out.
const gatewayCpus = Number(process.env.BENCH_GATEWAY_CPUS ?? 0.25);

function child(script, ready, args = []) {
  // execArgv: [] keeps --cpu-prof (and friends) on the gateway process only.
  const proc = fork(join(here, script), ["--child", ...args], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    execArgv: [],
  });
  return {
    proc,
    ready: ready ? new Promise((resolve) => proc.once("message", resolve)) : undefined,
  };
}

/** `onPhase` is told when the measured window starts ("measuring") and ends ("measured"). */
async function load(options, favoured, onPhase, onBlock) {
  if (inline) return runLoad({ ...options, onPhase, onBlock });
  const { proc } = child("bench-load.mjs");
  if (favoured) favourCpu(proc.pid);
  const result = new Promise((resolve, reject) => {
    proc.on("message", (message) => {
      if (message.phase?.startsWith("block-")) {
        onBlock?.(message.phase.slice("block-".length), message.index);
        proc.send("go");
      } else if (message.phase) onPhase?.(message.phase);
      else resolve(message);
    });
    proc.once("exit", (code) =>
      code === 0 ? undefined : reject(new Error(`load generator exited ${code}`)),
    );
  });
  proc.send({ ...options, phases: true });
  return result;
}

const upstreamChild = child("bench-upstream.mjs", true);
const { url: upstreamUrl } = await upstreamChild.ready;

// BENCH_REQUEST_LINES=text|json: the line per request `gateway serve` prints, here to stderr.
const lineFormat = process.env.BENCH_REQUEST_LINES;
const onRequest = lineFormat
  ? (await import("../dist/cli/request-lines.js")).requestLinePrinter(lineFormat, process.stderr)
  : undefined;
const dir = mkdtempSync(join(tmpdir(), "gateway-bench-"));
const gatewayOptions = {
  onRequest,
  // BENCH_METRICS=off|public|admin: /metrics (admin by default, as in `gateway serve`).
  metrics: process.env.BENCH_METRICS ?? "admin",
  port: 0,
  config: benchConfig(upstreamUrl),
};
const gw = await startGateway({ ...gatewayOptions, db: join(dir, "bench.db") });

const bare = await startBareProxy(upstreamUrl);
// The gateway and the bare proxy again, each alone in a process, started for their rows.
const ownProcesses = new Map();
async function ownProcess(kind) {
  if (ownProcesses.has(kind)) return ownProcesses.get(kind);
  let started;
  if (kind === "bare") {
    const { proc, ready } = child("bench-bare-proxy.mjs", true, [upstreamUrl]);
    started = { url: (await ready).url, pid: proc.pid, stop: async () => proc.kill() };
  } else {
    const configFile = join(dir, "serve-config.json");
    writeFileSync(configFile, JSON.stringify(gatewayOptions.config));
    started = await serveProcess(join(dir, "serve.db"), configFile);
  }
  ownProcesses.set(kind, started);
  return started;
}
const minimal = await startMinimalGateway(upstreamUrl, benchKey);

const scenarios = [
  {
    id: "up-50",
    label: "upstream direct, JSON",
    target: upstreamUrl,
    connections: 50,
    stream: false,
  },
  {
    id: "bare-50",
    label: "bare proxy (floor), JSON",
    target: bare.url,
    connections: 50,
    stream: false,
  },
  { id: "gw-50", label: "gateway, JSON", target: gw.url, connections: 50, stream: false },
  // The gateway and the bare proxy each alone in a process, for their memory: the rows above
  // share the bench's process.
  {
    id: "gwp-50",
    label: "gateway serve process, JSON",
    ownProcess: "gateway",
    connections: 50,
    stream: false,
  },
  {
    id: "barep-50",
    label: "bare proxy process, JSON",
    ownProcess: "bare",
    connections: 50,
    stream: false,
  },
  {
    id: "up-1",
    label: "upstream direct, JSON",
    target: upstreamUrl,
    connections: 1,
    stream: false,
  },
  {
    id: "bare-1",
    label: "bare proxy (floor), JSON",
    target: bare.url,
    connections: 1,
    stream: false,
  },
  {
    id: "min-1",
    label: "minimal gateway (floor), JSON",
    target: minimal.url,
    connections: 1,
    stream: false,
  },
  { id: "gw-1", label: "gateway, JSON", target: gw.url, connections: 1, stream: false },
  {
    id: "up-s1",
    label: "upstream direct, stream",
    target: upstreamUrl,
    connections: 1,
    stream: true,
  },
  { id: "gw-s1", label: "gateway, stream", target: gw.url, connections: 1, stream: true },
  {
    id: "up-s50",
    label: "upstream direct, stream",
    target: upstreamUrl,
    connections: 50,
    stream: true,
  },
  { id: "gw-s50", label: "gateway, stream", target: gw.url, connections: 50, stream: true },
  // Paced streams, as a provider sends them: the stream stays open and its chunks leave `pace` ms
  // apart, so the first data event cannot ride along with later ones. Its added latency is the
  // gateway's fixed cost on the way to the first token; CPU per event is the gateway's per chunk.
  ...[1, 5].flatMap((pace) => [
    {
      id: `up-p${pace}`,
      label: `upstream direct, stream paced ${pace} ms`,
      target: upstreamUrl,
      connections: 1,
      stream: true,
      pace,
    },
    {
      id: `gw-p${pace}`,
      label: `gateway, stream paced ${pace} ms`,
      target: gw.url,
      connections: 1,
      stream: true,
      pace,
    },
  ]),
  {
    id: "bare-p1",
    label: "bare proxy (floor), stream paced 1 ms",
    target: bare.url,
    connections: 1,
    stream: true,
    pace: 1,
  },
  // A JSON request measured after a paced stream on its connection: the non-stream added cost
  // under the conditions a paced stream's first event meets (every process of the chain idle
  // between chunks, other code run meanwhile), where `gw-1` measures it in a tight loop.
  ...["up", "gw"].map((side) => ({
    id: `${side}-pj1`,
    label: `${side === "up" ? "upstream directly" : "gateway"}, JSON after a stream paced 1 ms`,
    target: side === "up" ? upstreamUrl : gw.url,
    connections: 1,
    stream: false,
    before: 1,
  })),
  {
    id: "gw-p1-20",
    label: "gateway, stream paced 1 ms",
    target: gw.url,
    connections: 20,
    stream: true,
    pace: 1,
  },
  // The floors' pairs again, each server alone in a process (`gateway serve`, the bare proxy),
  // in blocks of a second at each in turn (six rounds): compared under the same minutes'
  // conditions, where the rows above run a minute apart, and each process's CPU its own, where
  // servers sharing the bench's process would collect each other's garbage.
  {
    id: "ab-1",
    label: "upstream, bare proxy and gateway processes in alternating blocks, JSON",
    blocks: ["upstream", "bare", "gateway"],
    connections: 1,
    stream: false,
  },
  {
    id: "ab-50",
    label: "bare proxy and gateway processes in alternating blocks, JSON",
    blocks: ["bare", "gateway"],
    connections: 50,
    stream: false,
  },
  {
    id: "gw-pg-1",
    label: "gateway on Postgres, JSON",
    postgres: "in-process",
    connections: 1,
    stream: false,
  },
  {
    // A stream's delivery mark is a database write the first piece waits for (docs/metering.md):
    // on Postgres a round trip on the way to the first token, which `gw-p1` on SQLite does not pay.
    id: "gw-pg-p1",
    label: "gateway on Postgres, stream paced 1 ms",
    postgres: "in-process",
    connections: 1,
    stream: true,
    pace: 1,
  },
  {
    // The same at 20 streams at once: what a streamed answer costs the shared database (its
    // statements and CPU a stream), the figure scale-out divides Postgres by.
    id: "gw-pg-p1-20",
    label: "gateway on Postgres, stream paced 1 ms",
    postgres: "in-process",
    connections: 20,
    stream: true,
    pace: 1,
  },
  {
    // The upstream, the SQLite gateway and the Postgres one, one request at a time to each in
    // turn: what Postgres adds, measured under the same moment's conditions on both.
    id: "pair-1",
    label: "gateway on Postgres, JSON, alternating",
    postgres: "in-process",
    alternate: true,
    connections: 1,
    stream: false,
  },
  {
    id: "gw-pg-50",
    label: "gateway on Postgres, JSON",
    postgres: "in-process",
    connections: 50,
    stream: false,
  },
  {
    id: "gw-pgp-50",
    label: "1 gateway process on Postgres, JSON",
    postgres: 1,
    connections: 50,
    stream: false,
  },
  {
    id: "gw-pg2-50",
    label: "2 gateway processes on Postgres, JSON",
    postgres: 2,
    connections: 50,
    stream: false,
  },
  // The same, each gateway process held to one CPU quota (a cgroup of its own, as a container
  // gets): what a second gateway adds when each has its own share of a machine.
  ...[1, 2].map((count) => ({
    id: `gw-pgq${count}-50`,
    label: `${count} gateway process${count === 1 ? "" : "es"} on Postgres, ${gatewayCpus} CPU each, JSON`,
    postgres: count,
    cpus: gatewayCpus,
    connections: 50,
    stream: false,
  })),
];
const selected = scenarios.filter((s) => !only || only.includes(s.id));

// Started when the first Postgres row runs, so the rows before it measure what they always did.
const postgresSkipped = selected.some((s) => s.postgres) ? postgresMissing() : undefined;
const quotaSkipped = selected.some((s) => s.cpus) ? cgroupMissing() : undefined;
let postgres;
const postgresTargets = new Map();
async function postgresTarget(kind, cpus) {
  const key = `${kind}/${cpus ?? ""}`;
  if (postgresTargets.has(key)) return postgresTargets.get(key);
  postgres ??= await startPostgresBench(startGateway, dir);
  let target;
  if (kind === "in-process") {
    const gateway = await postgres.gateway(gatewayOptions);
    target = { url: gateway.url, port: gateway.port, pids: [], database: gateway.database };
  } else {
    const gateways = await postgres.processes(kind, gatewayOptions.config, cpus);
    target = {
      url: gateways.map((g) => g.url),
      pids: gateways.map((g) => g.pid),
      database: gateways.database,
      // Each process row has its own processes: stopped after it, so that idle gateways (their
      // leases, heartbeats and listeners) do not take CPU from the rows after it.
      stop: () => Promise.all(gateways.map((g) => g.stop())),
    };
  }
  postgresTargets.set(key, target);
  return target;
}

// The bench process's resident memory while a scenario runs: the gateway's, with the two idle
// floors beside it.
const mb = (bytes) => Math.round(bytes / 1048576);
function sampleMemory() {
  let peak = { rss: 0 };
  const timer = setInterval(() => {
    const m = process.memoryUsage();
    if (m.rss > peak.rss) peak = m;
  }, 100);
  return {
    stop() {
      clearInterval(timer);
      return peak;
    },
  };
}

/** The process's peak resident memory so far, in MB (/proc's VmHWM; NaN where there is none). */
function peakRssMb(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/status`, "utf8");
    return Math.round(Number(/^VmHWM:\s+(\d+) kB/m.exec(text)?.[1]) / 1024);
  } catch {
    return Number.NaN;
  }
}

const results = new Map();
try {
  for (const s of selected) {
    if ((s.postgres && postgresSkipped) || (s.cpus && quotaSkipped)) continue;
    const pgTarget = s.postgres ? await postgresTarget(s.postgres, s.cpus) : undefined;
    const own = s.ownProcess ? await ownProcess(s.ownProcess) : undefined;
    const ownPid = own?.pid;
    if (s.cpus) {
      // Moved for the quota rows only, which run last: the rows before measure as they did.
      favourCpu(upstreamChild.proc.pid);
      for (const pid of postgresPids(postgres.server.pid)) favourCpu(pid);
    }
    const port = s.target === gw.url ? gw.port : pgTarget?.port;
    const stages =
      stagesWanted && port !== undefined && s.connections === 1 ? collectStages(port) : undefined;
    // The CPU each process spent, read when the measured window starts and ends: the warm-up's
    // (JIT compilation, first-use paths) is not a request's steady cost.
    const cpuNow = () => {
      const own = process.cpuUsage();
      return {
        bench: own.user + own.system,
        children: pgTarget?.pids.map((pid) => processCpuUs(pid)),
        db: s.postgres ? postgresCpuUs(postgres.server.pid) : undefined,
        upstream: processCpuUs(upstreamChild.proc.pid),
        own: ownPid ? processCpuUs(ownPid) : undefined,
      };
    };
    const window = { start: cpuNow(), end: undefined };
    const statementsBefore = pgTarget ? await postgres.statements(pgTarget.database) : undefined;
    const memory = sampleMemory();
    // Alternating blocks: each server process's CPU in its blocks, summed.
    const blockTargets = s.blocks
      ? await Promise.all(
          s.blocks.map((kind) => (kind === "upstream" ? { url: upstreamUrl } : ownProcess(kind))),
        )
      : undefined;
    const blockCpu = s.blocks?.map(() => 0);
    let blockStart = 0;
    const onBlock = (phase, index) => {
      const pid = blockTargets[index].pid;
      if (pid === undefined) return;
      if (phase === "start") blockStart = processCpuUs(pid);
      else blockCpu[index] += processCpuUs(pid) - blockStart;
    };
    const r = await load(
      {
        url: s.alternate
          ? [upstreamUrl, gw.url, pgTarget.url]
          : (blockTargets?.map((t) => t.url) ?? pgTarget?.url ?? own?.url ?? s.target),
        alternate: s.alternate,
        blockMs: s.blocks ? blockMs : undefined,
        rounds: blockRounds,
        path: "/v1/chat/completions",
        headers: benchHeaders,
        body: benchBody(s.stream, s.pace),
        connections: s.connections,
        durationMs,
        // The alternating row's gateways get a longer warm-up: a fresh Postgres gateway and
        // database are still settling (JIT tiers, the new tables' first analyses) after one second.
        warmupMs: s.alternate ? Math.max(warmupMs, alternateWarmupMs) : warmupMs,
        // A paced row warms up on the same stream unpaced: its own pace would give the JIT a few
        // dozen requests where the other rows give it thousands.
        warmBody: s.pace === undefined ? undefined : benchBody(s.stream, 0),
        beforeBody: s.before === undefined ? undefined : benchBody(true, s.before),
        beforeWarmBody: s.before === undefined ? undefined : benchBody(true, 0),
        stream: s.stream,
      },
      s.cpus !== undefined,
      (phase) => {
        if (phase === "measuring") window.start = cpuNow();
        else window.end = cpuNow();
      },
      s.blocks ? onBlock : undefined,
    );
    if (blockCpu)
      for (const [i, part] of r.perUrl.entries())
        part.cpuPerRequestUs = blockCpu[i] / Math.max(1, part.count);
    // An alternating row reports no phases: its CPU is over warm-up and run, per round.
    window.end ??= cpuNow();
    const requests = s.alternate ? r.total : r.count;
    r.memory = memory.stop();
    // CPU per request answered in the measured window: the gateway's (this process, or the gateway
    // processes together) and the database server's.
    const perRequest = (us) => us / Math.max(1, requests);
    const spent = (part) => window.end[part] - window.start[part];
    const bench = spent("bench");
    const childCpu = pgTarget?.pids.map(
      (_, i) => window.end.children[i] - window.start.children[i],
    );
    r.cpuPerRequestUs = perRequest(childCpu?.length ? childCpu.reduce((a, b) => a + b) : bench);
    if (ownPid) {
      r.cpuPerRequestUs = perRequest(spent("own"));
      r.ownPeakRssMb = peakRssMb(ownPid);
    }
    if (childCpu?.length) r.cpuShares = childCpu.map((us) => Math.round(perRequest(us)));
    if (s.postgres) {
      r.dbCpuPerRequestUs = perRequest(spent("db"));
      // Statements per request are a ratio the warm-up does not bend: over the whole row.
      r.statementsPerRequest =
        ((await postgres.statements(pgTarget.database)) - statementsBefore) / Math.max(1, r.total);
    }
    if (stages) r.stages = stages.stop();
    // The bench's own processes share the machine with the gateway: what they cost is what the
    // gateway could not have.
    r.upstreamCpuUs = perRequest(spent("upstream"));
    r.benchCpuUs = pgTarget?.pids.length ? perRequest(bench) : undefined;
    results.set(s.id, r);
    await pgTarget?.stop?.();
    process.stderr.write(
      `  ${s.id.padEnd(7)} ${Math.round(r.rps)} req/s, ${r.total} requests in all, peak RSS ${mb(r.memory.rss)} MB (heap ${mb(r.memory.heapUsed)} used of ${mb(r.memory.heapTotal)}, external ${mb(r.memory.external)})${r.cpuShares ? `, gateway processes' CPU ${r.cpuShares.join(" + ")} us/req` : ""}, load generator ${Math.round(r.loadCpuUs ?? Number.NaN)} us/req, upstream ${Math.round(r.upstreamCpuUs)} us/req${r.benchCpuUs === undefined ? "" : `, bench process ${Math.round(r.benchCpuUs)} us/req`}${r.errors ? `, ${r.errors} errors (${r.firstError})` : ""}\n`,
    );
  }
} finally {
  await gw.close();
  await postgres?.stop();
  releaseCgroups();
  await bare.close();
  await minimal.close();
  upstreamChild.proc.kill();
  for (const own of ownProcesses.values()) await own.stop();
  rmSync(dir, { recursive: true, force: true });
}

const ms = (v) => (typeof v !== "number" || Number.isNaN(v) ? "-" : v.toFixed(3));
const rows = scenarios
  .filter((s) => results.has(s.id) && !s.blocks)
  .map((s) => {
    const r = results.get(s.id);
    // An alternating row's process serves both gateways: its CPU is not one gateway's.
    const cpu =
      (s.target === gw.url ||
        s.target === bare.url ||
        s.target === minimal.url ||
        s.postgres ||
        s.ownProcess) &&
      !inline &&
      !s.alternate
        ? Math.round(r.cpuPerRequestUs).toString()
        : "-";
    const dbCpu = Number.isFinite(r.dbCpuPerRequestUs)
      ? Math.round(r.dbCpuPerRequestUs).toString()
      : "-";
    const statements = Number.isFinite(r.statementsPerRequest)
      ? r.statementsPerRequest.toFixed(2)
      : "-";
    return [
      s.label,
      String(s.connections),
      s.alternate ? "-" : Math.round(r.rps).toString(),
      ms(r.p50),
      ms(r.p99),
      ms(r.ttfbP50),
      ms(r.ttfbP99),
      cpu,
      dbCpu,
      statements,
      s.target === gw.url || s.postgres === "in-process"
        ? String(mb(r.memory.rss))
        : r.ownPeakRssMb !== undefined
          ? String(r.ownPeakRssMb)
          : "-",
      String(r.errors),
    ];
  });
const head = [
  "scenario",
  "conns",
  "req/s",
  "p50 ms",
  "p99 ms",
  "TTFB p50",
  "TTFB p99",
  "gw CPU us/req",
  "db CPU us/req",
  "db stmts/req",
  "peak RSS MB",
  "errors",
];
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const line = (cells) =>
  `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(" | ")} |`;
console.log(
  `\nload generator: ${inline ? "in the gateway's process" : "child process"}; ${seconds} s per scenario after ${warmupMs} ms warm-up\n`,
);
console.log(line(head));
console.log(
  `|${widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : `${"-".repeat(w + 1)}:`)).join("|")}|`,
);
for (const r of rows) console.log(line(r));

for (const s of scenarios.filter((x) => x.blocks && results.has(x.id))) {
  const r = results.get(s.id);
  console.log(
    `\n${s.label}, ${s.connections} connection${s.connections === 1 ? "" : "s"} each (${blockRounds} rounds of ${blockMs} ms at each):`,
  );
  for (const [i, part] of r.perUrl.entries()) {
    const cpu =
      s.blocks[i] === "upstream" ? "" : `, CPU ${Math.round(part.cpuPerRequestUs)} us/req`;
    console.log(
      `  ${s.blocks[i].padEnd(8)} ${Math.round(part.rps)} req/s, p50 ${ms(part.p50)} ms, p99 ${ms(part.p99)} ms${cpu}`,
    );
  }
}

for (const s of scenarios) {
  const steps = results.get(s.id)?.stages;
  if (!steps) continue;
  console.log(
    `\n${s.label}, 1 connection: median time between steps (µs; collecting them slows this row)`,
  );
  const width = Math.max(...steps.map((x) => x.step.length));
  for (const { step, p50 } of steps)
    console.log(`  ${step.padEnd(width)} ${p50.toFixed(1).padStart(7)}`);
}

const added = (gwId, upId, field) => {
  const g = results.get(gwId)?.[field];
  const u = results.get(upId)?.[field];
  return g === undefined || u === undefined ? undefined : g - u;
};
console.log("");
console.log(
  `gateway JSON throughput at 50 connections:   ${Math.round(results.get("gw-50")?.rps ?? 0)} req/s (target >= 6000)`,
);
console.log(
  `added p50 at 1 connection:                   ${ms(added("gw-1", "up-1", "p50"))} ms (target <= 0.25)`,
);
console.log(
  `added stream TTFB p50 at 1 connection:       ${ms(added("gw-s1", "up-s1", "ttfbP50"))} ms (target <= 1)`,
);
for (const pace of [1, 5]) {
  console.log(
    `added first data event, paced ${pace} ms:        ${ms(added(`gw-p${pace}`, `up-p${pace}`, "ttfbP50"))} ms p50 (target <= the non-stream added p50)`,
  );
}
for (const id of ["gw-p1", "gw-p5", "gw-p1-20"]) {
  const r = results.get(id);
  if (!r) continue;
  const s = scenarios.find((x) => x.id === id);
  console.log(
    `gateway CPU per streamed event, ${`${s.connections} conn${s.connections === 1 ? "" : "s"}, paced ${s.pace} ms:`.padEnd(23)} ${(r.cpuPerRequestUs / pacedEvents).toFixed(1)} us (${Math.round(r.cpuPerRequestUs)} us a stream of ${pacedEvents} events; target <= 25)`,
  );
}
console.log(
  `bare proxy's added p50 at 1 connection:      ${ms(added("bare-1", "up-1", "p50"))} ms (the floor: HTTP in and out, no gateway work)`,
);
console.log(
  `minimal gateway's added p50 at 1 connection: ${ms(added("min-1", "up-1", "p50"))} ms (the floor with the billing work: key hash, parse, hold, charge and log committed first)`,
);
console.log(
  `gateway's own work at 1 connection:          ${ms(added("gw-1", "bare-1", "p50"))} ms (gateway minus the bare proxy: auth, limits, billing, commit, log)`,
);
console.log(
  `gateway's structure at 1 connection:         ${ms(added("gw-1", "min-1", "p50"))} ms (gateway minus the minimal gateway: routing, limits, dispatch layers; the minimal one commits before it answers, the gateway journals)`,
);
printFloors();
if (postgresSkipped) {
  console.log(`\nPostgres rows skipped: ${postgresSkipped}`);
} else if (selected.some((s) => s.postgres)) {
  const rps = (id) => (results.has(id) ? Math.round(results.get(id).rps).toString() : "-");
  console.log(
    `Postgres's added p50 over SQLite at 1 connection: ${ms(added("gw-pg-1", "gw-1", "p50"))} ms (target <= 0.5)`,
  );
  if (results.has("gw-pg-p1"))
    console.log(
      `Postgres's added first data event over SQLite, paced 1 ms: ${ms(added("gw-pg-p1", "gw-p1", "ttfbP50"))} ms (the delivery mark's round trip)`,
    );
  const pair = results.get("pair-1")?.perUrl;
  if (pair) {
    const [up, sqlite, pg] = pair;
    console.log(
      `Postgres's added p50 over SQLite, alternating requests at 1 connection: ${ms(pg.p50 - sqlite.p50)} ms (p90 ${ms(pg.p90 - sqlite.p90)} ms; SQLite's own added p50 ${ms(sqlite.p50 - up.p50)} ms)`,
    );
  }
  console.log(
    `JSON throughput at 50 connections:           SQLite ${rps("gw-50")}, Postgres ${rps("gw-pg-50")}; gateway processes on Postgres: one ${rps("gw-pgp-50")}, two ${rps("gw-pg2-50")} req/s`,
  );
  printScaleModel();
  const [oneQ, twoQ] = [results.get("gw-pgq1-50"), results.get("gw-pgq2-50")];
  if (quotaSkipped) console.log(`CPU-quota rows skipped: ${quotaSkipped}`);
  else if (oneQ && twoQ) {
    console.log(
      `gateways held to ${gatewayCpus} CPU each, 50 connections: one ${Math.round(oneQ.rps)}, two ${Math.round(twoQ.rps)} req/s: two serve ${(twoQ.rps / oneQ.rps).toFixed(2)}x what one does (floor >= 1.6x)`,
    );
  }
}

/**
 * Requests/s that N gateways on a K-core Postgres could serve, from what a request cost each side
 * at 50 connections: each gateway process has a core (Node runs a request on one thread), and the
 * database's cores are shared by all. N >= 2 uses the two-gateway row (smaller batches per
 * gateway cost the database more per request than one gateway's). A linear model: it holds while
 * neither side's cost per request grows with the load, and says which side runs out first.
 */
function printScaleModel() {
  const one = results.get("gw-pgp-50");
  const two = results.get("gw-pg2-50");
  if (!one || !two) return;
  const perSide = (r) =>
    `gateway ${Math.round(r.cpuPerRequestUs)} us, Postgres ${Math.round(r.dbCpuPerRequestUs)} us and ${r.statementsPerRequest.toFixed(2)} statements`;
  console.log(`\nscale model, per request at 50 connections: one gateway process ${perSide(one)};`);
  console.log(`  two gateway processes ${perSide(two)} (their CPU summed)`);
  const cores = [2, 4, 8, 16];
  const gateways = [1, 2, 4, 8, 16];
  console.log(
    `  projected req/s, N gateways (one core each) on a K-core Postgres: ${cores.map((k) => `K=${k}`).join(", ")}`,
  );
  for (const n of gateways) {
    const r = n === 1 ? one : two;
    const projected = cores.map((k) =>
      Math.round(Math.min((n * 1e6) / r.cpuPerRequestUs, (k * 1e6) / r.dbCpuPerRequestUs)),
    );
    console.log(
      `    N=${String(n).padEnd(2)} ${projected.map((v) => String(v).padStart(7)).join(" ")}`,
    );
  }
}

/**
 * Issue 31's figures, each beside its floor from this same run: the bare proxy's (HTTP in and out,
 * no gateway work) with the margin the issue allows, or a fixed bound.
 */
function printFloors() {
  const get = (id, field) => results.get(id)?.[field];
  const lines = [];
  const ratio = (a, b) => (a === undefined || b === undefined ? "-" : `${(a / b).toFixed(2)}x`);
  const us = (v) => (v === undefined ? "-" : `${Math.round(v)} us`);
  const fig = (label, value, floor) =>
    lines.push(`  ${label.padEnd(52)} ${value.padEnd(28)} ${floor}`);
  // Each JSON figure twice, by one formatter: from its rows (a minute apart), and from the
  // alternating blocks (`ab-50`, `ab-1`: the same servers in turn, second by second).
  const [ab50, ab1] = [get("ab-50", "perUrl"), get("ab-1", "perUrl")];
  const pair = (label, format, [gw, bare], inBlocks) => {
    if (gw !== undefined && bare !== undefined) fig(label, ...format(gw, bare));
    if (inBlocks)
      lines.push(`    ${`${label}, alternating`.padEnd(50)} ${format(...inBlocks).join(" ")}`);
  };
  const against = (value, gw, bare, floor) => [
    `${value} (${ratio(gw, bare)})`.padEnd(28),
    `floor: ${floor}`,
  ];
  pair(
    "JSON req/s, 50 connections",
    (gw, bare) => against(Math.round(gw), gw, bare, `the bare proxy's ${Math.round(bare)}`),
    [get("gw-50", "rps"), get("bare-50", "rps")],
    ab50 && [ab50[1].rps, ab50[0].rps],
  );
  pair(
    "CPU per request, 50 connections",
    (gw, bare) => against(us(gw), gw, bare, `the bare proxy's ${us(bare)}`),
    [get("gw-50", "cpuPerRequestUs"), get("bare-50", "cpuPerRequestUs")],
    ab50 && [ab50[1].cpuPerRequestUs, ab50[0].cpuPerRequestUs],
  );
  const gwAdded = added("gw-1", "up-1", "p50");
  pair(
    "added p50, 1 connection",
    (gw, bare) =>
      against(
        `${ms(gw)} ms`,
        gw,
        bare,
        `<= 1.1x the bare proxy's ${ms(bare)} ms = ${ms(1.1 * bare)} ms`,
      ),
    [gwAdded, added("bare-1", "up-1", "p50")],
    ab1 && [ab1[2].p50 - ab1[0].p50, ab1[1].p50 - ab1[0].p50],
  );
  pair(
    "CPU per request, 1 connection",
    (gw, bare) =>
      against(us(gw), gw, bare, `<= 1.15x the bare proxy's ${us(bare)} = ${us(1.15 * bare)}`),
    [get("gw-1", "cpuPerRequestUs"), get("bare-1", "cpuPerRequestUs")],
    ab1 && [ab1[2].cpuPerRequestUs, ab1[1].cpuPerRequestUs],
  );
  for (const pace of [1, 5]) {
    const first = added(`gw-p${pace}`, `up-p${pace}`, "ttfbP50");
    if (first !== undefined)
      fig(
        `added first data event, paced ${pace} ms, 1 connection`,
        `${ms(first)} ms`,
        `floor: <= the non-stream added p50, ${ms(gwAdded)} ms`,
      );
  }
  // The same event beside what it meets: a JSON request measured after a paced stream, and the
  // bare proxy's first event of the same stream.
  const [afterPaced, bareFirst] = [
    added("gw-pj1", "up-pj1", "p50"),
    added("bare-p1", "up-p1", "ttfbP50"),
  ];
  if (afterPaced !== undefined)
    lines.push(
      `    beside it: the non-stream added p50 after a paced stream, as that event comes, ${ms(afterPaced)} ms`,
    );
  if (bareFirst !== undefined)
    lines.push(
      `    beside it: the bare proxy's added first data event, paced 1 ms, ${ms(bareFirst)} ms`,
    );
  const streamCpu = get("gw-p1-20", "cpuPerRequestUs");
  if (streamCpu !== undefined)
    fig(
      "CPU per streamed event, 20 connections",
      `${(streamCpu / pacedEvents).toFixed(1)} us`,
      "floor: <= 25 us",
    );
  const [gwRss, bareRss] = [get("gwp-50", "ownPeakRssMb"), get("barep-50", "ownPeakRssMb")];
  if (gwRss !== undefined && bareRss !== undefined)
    fig(
      "peak RSS, each alone in a process, 50 connections",
      `${gwRss} MB (${gwRss >= bareRss ? "+" : ""}${gwRss - bareRss} MB)`,
      `floor: <= the bare proxy process's ${bareRss} MB + 20 MB`,
    );
  if (lines.length === 0) return;
  console.log("\nissue 31's figures, each beside its floor from this run:");
  for (const line of lines) console.log(line);
}
