// The resident memory of `gateway serve` itself, idle and under the benchmark's 50-connection
// JSON load: the gateway runs alone in its own process (in `npm run bench` it shares the bench
// process with the two floors), and its memory is read from /proc (Linux only).
//
//   node scripts/bench-rss.mjs                        this tree, a few rounds
//   node scripts/bench-rss.mjs --rounds=5 --variant="semi4 --max-semi-space-size=4"
//   node scripts/bench-rss.mjs --variant="base /tmp/base/bin/gateway" --variant="new"
//   node scripts/bench-rss.mjs --variant="plain" --variant="arenas MALLOC_ARENA_MAX=2"
//
// A variant is a label, then optionally a launcher path (another tree's bin/gateway), then node
// flags and NAME=value environment variables for the gateway's process. Variants run in turn,
// round after round, each round starting with the next one, so the machine's drift falls on all
// of them alike. Each line: RSS once started, after one request (the upstream client loaded), the
// peak under load (VmHWM), and the load's req/s, the gateway's CPU per request, p50 and p99.
import { fork, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { benchBody, benchConfig, benchHeaders } from "./bench-config.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const ownLauncher = join(here, "..", "bin", "gateway");
const argument = (name) =>
  process.argv.filter((a) => a.startsWith(`--${name}=`)).map((a) => a.slice(name.length + 3));
const rounds = Number(argument("rounds")[0] ?? 3);
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const connections = Number(argument("connections")[0] ?? 50);
const variants = (argument("variant").length > 0 ? argument("variant") : ["this"]).map((text) => {
  const [label, ...rest] = text.split(/\s+/).filter(Boolean);
  const env = Object.fromEntries(
    rest.filter((word) => /^[A-Z_]+=/.test(word)).map((word) => word.split(/=(.*)/, 2)),
  );
  const words = rest.filter((word) => !/^[A-Z_]+=/.test(word));
  const launcher = words[0] && !words[0].startsWith("-") ? words.shift() : ownLauncher;
  return { label, launcher, flags: words, env };
});

function child(script) {
  return fork(join(here, script), ["--child"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    execArgv: [],
  });
}

/** The process's CPU time so far in microseconds, user and system (/proc counts it in ticks). */
function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

function status(pid) {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
  return {
    rss: kb("VmRSS") / 1024,
    hwm: kb("VmHWM") / 1024,
    anon: kb("RssAnon") / 1024,
    file: kb("RssFile") / 1024,
  };
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The resident memory once two readings half a second apart agree (or after a few tries). */
async function settled(pid) {
  let before = status(pid).rss;
  for (let tries = 0; tries < 10; tries++) {
    await pause(500);
    const now = status(pid).rss;
    if (Math.abs(now - before) < 0.5) return now;
    before = now;
  }
  return before;
}

async function load(url, durationMs) {
  const proc = child("bench-load.mjs");
  const result = new Promise((resolve, reject) => {
    proc.once("message", resolve);
    proc.once("exit", (code) =>
      code === 0 ? undefined : reject(new Error(`load generator exited ${code}`)),
    );
  });
  proc.send({
    url,
    path: "/v1/chat/completions",
    headers: benchHeaders,
    body: benchBody(false),
    connections,
    durationMs,
    warmupMs: Math.min(1000, durationMs / 2),
    stream: false,
  });
  return result;
}

const upstream = child("bench-upstream.mjs");
const { url: upstreamUrl } = await new Promise((resolve) => upstream.once("message", resolve));
const dir = mkdtempSync(join(tmpdir(), "gateway-bench-rss-"));
const configPath = join(dir, "config.json");
writeFileSync(configPath, JSON.stringify(benchConfig(upstreamUrl)));

async function measure(variant, round) {
  const db = join(dir, `${variant.label}-${round}.db`);
  const gateway = spawn(
    process.execPath,
    [
      ...variant.flags,
      variant.launcher,
      "serve",
      "--port",
      "0",
      "--json",
      "--quiet",
      "--db",
      db,
      "--config",
      configPath,
    ],
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, ...variant.env } },
  );
  try {
    const ready = await new Promise((resolve, reject) => {
      gateway.stdout.once("data", (line) => resolve(JSON.parse(line.toString())));
      gateway.once("exit", (code) => reject(new Error(`gateway exited ${code}`)));
    });
    // The ready line comes before work done just after it (the upstream client's warm-up, the
    // checkpointer's thread), so idle is read once the memory stops moving.
    const idle = await settled(gateway.pid);
    const first = await fetch(`${ready.url}/v1/chat/completions`, {
      method: "POST",
      headers: benchHeaders,
      body: benchBody(false),
    });
    await first.arrayBuffer();
    const served = await settled(gateway.pid);
    const cpuBefore = cpuMicros(gateway.pid);
    // What the resident memory is made of at its highest reading: anonymous memory (the heaps,
    // malloc's arenas, thread stacks) or pages of mapped files (node's binary, libraries).
    let top = status(gateway.pid);
    const sampler = setInterval(() => {
      const now = status(gateway.pid);
      if (now.rss > top.rss) top = now;
    }, 50);
    const result = await load(ready.url, seconds * 1000).finally(() => clearInterval(sampler));
    const { hwm } = status(gateway.pid);
    const cpuPerRequest = (cpuMicros(gateway.pid) - cpuBefore) / Math.max(1, result.total);
    return { idle, served, peak: hwm, top, cpuPerRequest, result };
  } finally {
    gateway.kill("SIGTERM");
    await new Promise((resolve) => gateway.once("exit", resolve));
  }
}

const rows = new Map(variants.map((variant) => [variant.label, []]));
try {
  for (let round = 1; round <= rounds; round++) {
    // Each round starts with the next variant, so none always runs on the machine's busiest turn.
    const order = variants.map((_, at) => variants[(at + round - 1) % variants.length]);
    for (const variant of order) {
      const row = await measure(variant, round);
      rows.get(variant.label).push(row);
      console.log(
        `${variant.label.padEnd(10)} idle ${row.idle.toFixed(1)} MB, after one request ${row.served.toFixed(1)} MB, peak under load ${row.peak.toFixed(1)} MB (highest reading ${row.top.rss.toFixed(1)}: ${row.top.anon.toFixed(1)} anonymous, ${row.top.file.toFixed(1)} mapped files); ${Math.round(row.result.rps)} req/s, ${Math.round(row.cpuPerRequest)} us CPU/req, p50 ${row.result.p50.toFixed(3)} ms, p99 ${row.result.p99.toFixed(3)} ms${row.result.errors ? `, ${row.result.errors} errors` : ""}`,
      );
    }
  }
} finally {
  upstream.kill();
  rmSync(dir, { recursive: true, force: true });
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};
console.log(`\nmedians over ${rounds} rounds, ${connections} connections, ${seconds} s each:`);
for (const [label, list] of rows) {
  console.log(
    `${label.padEnd(10)} idle ${median(list.map((r) => r.idle)).toFixed(1)} MB, after one request ${median(list.map((r) => r.served)).toFixed(1)} MB, peak ${median(list.map((r) => r.peak)).toFixed(1)} MB; ${Math.round(median(list.map((r) => r.result.rps)))} req/s, ${Math.round(median(list.map((r) => r.cpuPerRequest)))} us CPU/req, p50 ${median(list.map((r) => r.result.p50)).toFixed(3)} ms`,
  );
}
