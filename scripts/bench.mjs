// Benchmark: the gateway's full request path (auth, limits, billing reservation and settlement,
// request log, dispatch) against a fake OpenAI-compatible upstream on loopback.
//
//   npm run bench                       build, then run every scenario (~5 s each)
//   node scripts/bench.mjs --inline     load generator in the gateway's process, for comparison
//   BENCH_SECONDS=2 node scripts/bench.mjs
//   node --cpu-prof --cpu-prof-dir=prof scripts/bench.mjs --only=gw-50
//   node scripts/bench.mjs --stages       also the median time between steps at one connection
//   BENCH_REQUEST_LINES=text node scripts/bench.mjs   with serve's line per request (to stderr)
//   BENCH_METRICS=off node scripts/bench.mjs           without /metrics and its counting
//
// Two floors run beside the gateway in the same process: a bare proxy (HTTP in and out) and a
// minimal gateway (scripts/bench-minimal-gateway.mjs: the billing work with no structure).
// The fake upstream always runs in a child process. The load generator runs in a child process by
// default: on a 2-core machine that is the fairer number (the gateway keeps one core to itself).
import { fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startGateway } from "../dist/index.js";
import { startBareProxy } from "./bench-bare-proxy.mjs";
import { runLoad } from "./bench-load.mjs";
import { startMinimalGateway } from "./bench-minimal-gateway.mjs";
import { collectStages } from "./bench-stages.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const inline = process.argv.includes("--inline");
const stagesWanted = process.argv.includes("--stages");
const only = process.argv
  .find((a) => a.startsWith("--only="))
  ?.slice("--only=".length)
  .split(",");
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const durationMs = seconds * 1000;
const warmupMs = Math.min(1000, durationMs / 2);
const KEY = "kn-bench-0123456789abcdefghijklmnopqrstuv";

function child(script, ready) {
  // execArgv: [] keeps --cpu-prof (and friends) on the gateway process only.
  const proc = fork(join(here, script), ["--child"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    execArgv: [],
  });
  return {
    proc,
    ready: ready ? new Promise((resolve) => proc.once("message", resolve)) : undefined,
  };
}

async function load(options) {
  if (inline) return runLoad(options);
  const { proc } = child("bench-load.mjs");
  const result = new Promise((resolve, reject) => {
    proc.once("message", resolve);
    proc.once("exit", (code) =>
      code === 0 ? undefined : reject(new Error(`load generator exited ${code}`)),
    );
  });
  proc.send(options);
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
const gw = await startGateway({
  onRequest,
  // BENCH_METRICS=off|public|admin: /metrics (admin by default, as in `gateway serve`).
  metrics: process.env.BENCH_METRICS ?? "admin",
  db: join(dir, "bench.db"),
  port: 0,
  config: {
    providers: [
      { id: "up", wire: "openai", base_url: `${upstreamUrl}/v1`, api_keys: ["sk-bench-upstream"] },
    ],
    models: [
      {
        name: "bench-model",
        provider: "up",
        upstream_model: "bench-upstream",
        price_input_per_mtok: 1_000,
        price_output_per_mtok: 2_000,
      },
    ],
    accounts: [
      {
        id: "bench",
        balance_idr: 1_000_000_000_000,
        rpm_limit: 1_000_000_000,
        keys: [{ id: "bench-key", value: KEY }],
      },
    ],
  },
});

const bare = await startBareProxy(upstreamUrl);
const minimal = await startMinimalGateway(upstreamUrl, KEY);

const body = (stream) =>
  JSON.stringify({
    model: "bench-model",
    max_tokens: 16,
    stream,
    messages: [{ role: "user", content: "Say hi" }],
  });
const headers = { "content-type": "application/json", authorization: `Bearer ${KEY}` };

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
];

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

const results = new Map();
try {
  for (const s of scenarios) {
    if (only && !only.includes(s.id)) continue;
    const stages =
      stagesWanted && s.target === gw.url && s.connections === 1
        ? collectStages(gw.port)
        : undefined;
    const cpuBefore = process.cpuUsage();
    const memory = sampleMemory();
    const r = await load({
      url: s.target,
      path: "/v1/chat/completions",
      headers,
      body: body(s.stream),
      connections: s.connections,
      durationMs,
      warmupMs,
      stream: s.stream,
    });
    const cpu = process.cpuUsage(cpuBefore);
    r.memory = memory.stop();
    // Gateway-process CPU per request over warm-up and run together (only meaningful for gateway rows).
    r.cpuPerRequestUs =
      (cpu.user + cpu.system) / Math.max(1, r.count * (1 + warmupMs / durationMs));
    if (stages) r.stages = stages.stop();
    results.set(s.id, r);
    process.stderr.write(
      `  ${s.id.padEnd(7)} ${Math.round(r.rps)} req/s, ${r.total} requests in all, peak RSS ${mb(r.memory.rss)} MB (heap ${mb(r.memory.heapUsed)} used of ${mb(r.memory.heapTotal)}, external ${mb(r.memory.external)})${r.errors ? `, ${r.errors} errors (${r.firstError})` : ""}\n`,
    );
  }
} finally {
  await gw.close();
  await bare.close();
  await minimal.close();
  upstreamChild.proc.kill();
  rmSync(dir, { recursive: true, force: true });
}

const ms = (v) => (typeof v !== "number" || Number.isNaN(v) ? "-" : v.toFixed(3));
const rows = scenarios
  .filter((s) => results.has(s.id))
  .map((s) => {
    const r = results.get(s.id);
    const cpu =
      (s.target === gw.url || s.target === bare.url || s.target === minimal.url) && !inline
        ? Math.round(r.cpuPerRequestUs).toString()
        : "-";
    return [
      s.label,
      String(s.connections),
      Math.round(r.rps).toString(),
      ms(r.p50),
      ms(r.p99),
      ms(r.ttfbP50),
      ms(r.ttfbP99),
      cpu,
      s.target === gw.url ? String(mb(r.memory.rss)) : "-",
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
