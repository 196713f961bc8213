// Counted measures of a paced stream through the gateway, for runs where wall time is too noisy
// to compare (a shared machine): the gateway in this process, the fake upstream and an SSE client
// in child processes, `streams` streams one after another at one connection. Prints the gateway's
// CPU per stream and per event; run under `strace -c` (this process's thread only) for the system
// calls per event, or callgrind for its instructions (the measured streams' alone, in the dump
// callgrind_control writes):
//   BENCH_CALLGRIND=1 valgrind --tool=callgrind --callgrind-out-file=cg.%p node scripts/bench-stream-count.mjs 20 1
//
//   node scripts/bench-stream-count.mjs [streams] [pace ms]
//   strace -c node scripts/bench-stream-count.mjs 200 1
//   node scripts/bench-stream-count.mjs 2000 json     non-stream requests instead: CPU per request
//   BENCH_TARGET=bare node scripts/bench-stream-count.mjs 2000 json    the bare proxy, counted alike
import { execFileSync, fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startGateway } from "../dist/index.js";
import { startBareProxy } from "./bench-bare-proxy.mjs";
import { benchBody, benchConfig, benchHeaders } from "./bench-config.mjs";
import { pacedEvents } from "./bench-upstream.mjs";

if (process.argv.includes("--client")) {
  const { Pool } = await import("undici");
  process.on("message", async ({ url, n, body }) => {
    const pool = new Pool(url, { connections: 1 });
    let events = 0;
    for (let i = 0; i < n; i++) {
      const res = await pool.request({
        path: "/v1/chat/completions",
        method: "POST",
        headers: benchHeaders,
        body,
      });
      for await (const part of res.body) events += part.toString().split("\n\n").length - 1;
    }
    await pool.close();
    process.send({ events });
  });
  process.on("disconnect", () => process.exit(0));
} else await main();

async function main() {
  const here = fileURLToPath(new URL(".", import.meta.url));
  const streams = Number(process.argv[2] ?? 100);
  const json = process.argv[3] === "json";
  const pace = json ? undefined : Number(process.argv[3] ?? 1);

  const upstream = fork(join(here, "bench-upstream.mjs"), ["--child"], { execArgv: [] });
  const { url } = await new Promise((resolve) => upstream.once("message", resolve));
  const dir = mkdtempSync(join(tmpdir(), "gateway-stream-count-"));
  // BENCH_TARGET=bare: the bench's bare proxy in this process instead, for the same counts.
  const bare = process.env.BENCH_TARGET === "bare";
  const gw = bare
    ? await startBareProxy(url)
    : await startGateway({ port: 0, db: join(dir, "bench.db"), config: benchConfig(url) });

  // The client counts whole streams itself, so the gateway's CPU divides by what was really served.
  const client = fork(join(here, "bench-stream-count.mjs"), ["--client"], { execArgv: [] });
  const ask = (n) =>
    new Promise((resolve) => {
      client.once("message", resolve);
      client.send({ url: gw.url, n, body: json ? benchBody(false) : benchBody(true, pace) });
    });
  await ask(json ? 500 : Math.min(20, streams)); // warm-up
  // Under callgrind, the measured streams' instructions alone: counters zeroed before, dumped after.
  const callgrind = process.env.BENCH_CALLGRIND === "1";
  if (callgrind) execFileSync("callgrind_control", ["-z", String(process.pid)]);
  const before = process.cpuUsage();
  const { events } = await ask(streams);
  const cpu = process.cpuUsage(before);
  if (callgrind) execFileSync("callgrind_control", ["-d", String(process.pid)]);
  const us = cpu.user + cpu.system;
  if (json)
    console.log(
      `${streams} JSON requests at 1 connection: ${bare ? "bare proxy" : "gateway"} CPU ${Math.round(us / streams)} us a request (user ${Math.round(cpu.user / streams)} us, system ${Math.round(cpu.system / streams)} us)`,
    );
  else
    console.log(
      `${streams} streams paced ${pace} ms, ${events} events received: gateway CPU ${Math.round(us / streams)} us a stream, ${(us / (streams * pacedEvents)).toFixed(1)} us an event (user ${Math.round(cpu.user / streams)} us, system ${Math.round(cpu.system / streams)} us a stream)`,
    );
  client.kill();
  upstream.kill();
  await gw.close();
  rmSync(dir, { recursive: true, force: true });
}
