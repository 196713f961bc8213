import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { killRunningClis, spawnNode } from "./support/cli.js";

const root = join(import.meta.dirname, "..");
const heap = join(root, "dist", "cli", "heap.js");
const mib = 1024 * 1024;

/**
 * The largest young generation a node process reached while objects kept surviving their
 * collections, as a server's requests in flight do: with `cap`, after serve's capYoungGeneration.
 */
async function largestYoungGeneration(
  cap: boolean,
  execArgv: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  return Number(
    await runNode(
      execArgv,
      `
    const { getHeapSpaceStatistics } = await import("node:v8");
    const { capYoungGeneration } = await import(${JSON.stringify(heap)});
    if (${cap}) capYoungGeneration();
    const young = () => getHeapSpaceStatistics().find((s) => s.space_name === "new_space").space_size;
    let largest = young();
    // The last 128 Ki objects stay alive, so most of what each collection finds survives it.
    const alive = new Array(128 * 1024);
    for (let turn = 0; turn < 64; turn++) {
      for (let i = 0; i < 32 * 1024; i++) alive[(turn * 32 * 1024 + i) % alive.length] = { turn, i };
      // The observer hears of a collection between turns, as serve's between requests.
      await new Promise((resolve) => setImmediate(resolve));
      largest = Math.max(largest, young());
    }
    console.log(largest);
  `,
      env,
    ),
  );
}

// A child that outlives its test's bound goes with it.
afterEach(killRunningClis);

async function runNode(
  execArgv: string[],
  script: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const { code, stdout, stderr } = await spawnNode(
    [...execArgv, "--input-type=module", "-e", script],
    env,
  ).exit(15_000);
  expect(code, stderr).toBe(0);
  return stdout.trim();
}

describe("serve's young generation", () => {
  it("stops growing at 16 MB, where it grows to its largest without the cap", async () => {
    const [capped, free] = await Promise.all([
      largestYoungGeneration(true),
      largestYoungGeneration(false),
    ]);
    expect(free).toBeGreaterThan(16 * mib);
    expect(capped).toBe(16 * mib);
  });

  it("is left to an operator who sets its size on node's command line", async () => {
    const largest = await largestYoungGeneration(true, ["--max-semi-space-size=16"]);
    expect(largest).toBeGreaterThan(16 * mib);
  });

  it("is left to an operator who sets its size in NODE_OPTIONS", async () => {
    const env = { ...process.env, NODE_OPTIONS: "--max-semi-space-size=16" };
    const largest = await largestYoungGeneration(true, [], env);
    expect(largest).toBeGreaterThan(16 * mib);
  });
});
