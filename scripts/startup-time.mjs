// Measures how long `gateway serve` takes from process spawn to its ready line (users' CI starts it
// for every test run). Prints the median and worst of N runs on a fresh database each time.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const runs = Number(process.argv[2] ?? 10);
const bin = join(import.meta.dirname, "..", "bin", "gateway");
const times = [];
for (let i = 0; i < runs; i++) {
  const dir = mkdtempSync(join(tmpdir(), "gateway-startup-"));
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [bin, "serve", "--port", "0", "--json", "--db", join(dir, "g.db")],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const ready = await new Promise((resolve, reject) => {
    child.stdout.once("data", (d) => resolve(JSON.parse(d.toString())));
    child.once("exit", (code) => reject(new Error(`exited ${code}`)));
  });
  times.push(performance.now() - started);
  child.kill("SIGTERM");
  await new Promise((r) => child.once("exit", r));
  rmSync(dir, { recursive: true, force: true });
  if (i === 0) console.log(`in-process ready_ms (after imports): ${ready.ready_ms}`);
}
times.sort((a, b) => a - b);
console.log(
  `gateway serve, spawn to ready line, ${runs} runs: median ${times[Math.floor(runs / 2)].toFixed(0)} ms, worst ${times[runs - 1].toFixed(0)} ms`,
);
