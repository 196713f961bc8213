// Instructions per request, counted by valgrind's callgrind: the gateway (`gateway serve`, with
// the V8 settings serve gives itself) and the bare proxy, each warmed up first and counted over a
// fixed number of requests from a client outside the count. A count does not move with the load
// of a shared VM the way a CPU time does, so a change of a few percent shows in one run.
//
//   node scripts/bench-instructions.mjs                   both, JSON, one connection
//   node scripts/bench-instructions.mjs --stream          a stream; also per event
//   node scripts/bench-instructions.mjs --stream --pace=50 --connections=20 --warmup=400 --requests=200
//       streams whose chunks come 50 ms apart, so that each arrives on its own even at
//       callgrind's speed (unpaced, a stream's chunks reach the slowed process together)
//   node scripts/bench-instructions.mjs --completions --pace=50 --connections=20 --warmup=400 --requests=200
//       the same stream asked as a legacy completion (POST /v1/completions with a prompt), which
//       the gateway answers through chat as text_completion chunks (implies --stream)
//   node scripts/bench-instructions.mjs --target=gateway --keep=prof
//       keeps callgrind's file and V8's perf map in prof/ to read with callgrind_annotate
//   node scripts/bench-instructions.mjs --node=--max-semi-space-size=16
//       node flags for both targets (comma-separated), here one that undoes serve's cap on the
//       young generation (src/cli/heap.ts)
//
// Needs valgrind (Debian: apt-get install valgrind). Under callgrind the code runs about fifty
// times slower: a run of both targets takes a few minutes.
import { execFileSync, fork, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";
import { benchBody, benchCompletionBody, benchConfig, benchKey } from "./bench-config.mjs";
import { pacedEvents } from "./bench-upstream.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const option = (name, fallback) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const completions = process.argv.includes("--completions");
const stream = completions || process.argv.includes("--stream");
const connections = Number(option("connections", 1));
const pace = Number(option("pace", 0));
const warmup = Number(option("warmup", 5000));
const counted = Number(option("requests", 1000));
const targets = option("target", "both") === "both" ? ["bare", "gateway"] : [option("target")];
const keep = option("keep", undefined);
const nodeFlags = option("node", "").split(",").filter(Boolean);

try {
  execFileSync("valgrind", ["--version"], { stdio: "ignore" });
} catch {
  console.error("bench-instructions needs valgrind (Debian: apt-get install valgrind).");
  process.exit(2);
}

const work = mkdtempSync(join(tmpdir(), "gateway-instructions-"));
const upstream = fork(join(here, "bench-upstream.mjs"), ["--child"], {
  stdio: ["ignore", "inherit", "inherit", "ipc"],
  execArgv: [],
});
const { url: upstreamUrl } = await new Promise((ok) => upstream.once("message", ok));

/** node under callgrind, counting nothing until told to (callgrind_control -i on). */
function callgrindArgs(name) {
  return [
    "--tool=callgrind",
    "--smc-check=all-non-file",
    "--instr-atstart=no",
    // A file a thread: the main thread's count apart from V8's compiler and collector threads,
    // whose work after a warm-up is still the warm-up's (functions reaching TurboFan late).
    "--separate-threads=yes",
    `--callgrind-out-file=${join(work, `${name}.%p`)}`,
    "-q",
    process.execPath,
    ...(keep ? ["--perf-basic-prof"] : []),
    ...nodeFlags,
  ];
}

async function startTarget(name) {
  if (name === "bare") {
    // fork() runs execPath with the script: a wrapper puts node under valgrind, keeping the IPC.
    const wrapper = join(work, "valgrind-node.sh");
    const args = callgrindArgs(name)
      .map((a) => `'${a}'`)
      .join(" ");
    writeFileSync(wrapper, `#!/bin/sh\nexec valgrind ${args} "$@"\n`, { mode: 0o755 });
    const child = fork(join(here, "bench-bare-proxy.mjs"), ["--child", upstreamUrl], {
      execPath: wrapper,
      execArgv: [],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const { url } = await new Promise((ok) => child.once("message", ok));
    return { url, child };
  }
  const configFile = join(work, "config.json");
  writeFileSync(configFile, JSON.stringify(benchConfig(upstreamUrl)));
  const serve = [resolve(here, "../bin/gateway"), "serve", "--db", join(work, "bench.db")];
  serve.push("--config", configFile, "--port", "0", "--json", "--quiet");
  const child = spawn("valgrind", [...callgrindArgs(name), ...serve], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise((ok, fail) => {
    child.once("exit", (code) => fail(new Error(`gateway serve exited ${code} under valgrind`)));
    createInterface({ input: child.stdout }).once("line", ok);
  });
  return { url: JSON.parse(line).url, child };
}

async function send(url, agent, total) {
  let left = total;
  const body = completions ? benchCompletionBody(pace) : benchBody(stream, pace);
  const headers = { authorization: `Bearer ${benchKey}`, "content-type": "application/json" };
  const path = `${url}/v1/${completions ? "completions" : "chat/completions"}`;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (left-- > 0) {
        const answer = await request(path, { method: "POST", dispatcher: agent, headers, body });
        const text = await answer.body.text();
        if (answer.statusCode !== 200) throw new Error(`HTTP ${answer.statusCode}: ${text}`);
      }
    }),
  );
}

const results = {};
for (const name of targets) {
  const target = await startTarget(name);
  const agent = new Agent({ connections, keepAliveTimeout: 600_000 });
  const control = (...args) =>
    execFileSync("callgrind_control", [...args, String(target.child.pid)], { stdio: "ignore" });
  try {
    await send(target.url, agent, warmup);
    control("-i", "on");
    await send(target.url, agent, counted);
    control("-i", "off");
    control("-d");
  } finally {
    target.child.kill();
    await new Promise((ok) => target.child.once("exit", ok));
    await agent.close();
  }
  // The dump holds the counted requests only (a file a thread, `-01` the main one); the files
  // written at exit count nothing.
  const dumps = readdirSync(work).filter((f) => f.startsWith(`${name}.`) && /\.1-\d+$/.test(f));
  const count = (file) =>
    Number(readFileSync(join(work, file), "utf8").match(/^totals: (\d+)/m)?.[1] ?? 0);
  const main = dumps.find((f) => f.endsWith("-01"));
  results[name] = {
    all: dumps.reduce((sum, f) => sum + count(f), 0) / counted,
    main: count(main) / counted,
  };
  if (keep) {
    mkdirSync(keep, { recursive: true });
    const pid = main.split(".")[1];
    execFileSync("cp", [join(work, main), join(keep, `callgrind.${name}`)]);
    execFileSync("cp", [`/tmp/perf-${pid}.map`, join(keep, `perf-${name}.map`)]);
    rmSync(`/tmp/perf-${pid}.map`, { force: true });
  }
}
upstream.kill();
rmSync(work, { recursive: true, force: true });

const kind = stream
  ? `${completions ? "legacy completion " : ""}stream (chunks ${pace} ms apart)`
  : "JSON";
console.log(`instructions per request, ${kind}, ${connections} connection(s), ${counted} counted:`);
const shown = (n) => Math.round(n).toLocaleString("en");
for (const [name, { all, main }] of Object.entries(results)) {
  const perEvent = stream
    ? `  (${shown(all / pacedEvents)} an event; main thread ${shown(main / pacedEvents)})`
    : `  (main thread ${shown(main)})`;
  console.log(`  ${name.padEnd(8)} ${shown(all)}${perEvent}`);
}
if (results.bare && results.gateway) {
  const ratio = (side) => (results.gateway[side] / results.bare[side]).toFixed(2);
  console.log(`  gateway / bare proxy: ${ratio("all")}x (main thread ${ratio("main")}x)`);
}
