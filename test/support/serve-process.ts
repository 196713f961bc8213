import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";

const bin = join(import.meta.dirname, "..", "..", "bin", "gateway");

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  ready: { url: string; port: number; demo_key?: string; owner_url?: string; ready_ms: number };
  /** What the process wrote to stderr so far, for a failing test's message. */
  stderr(): string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * How long a start may take before the test gives up on it. A start on Postgres while other
 * gateways are under load was seen to take 9 s on a busy two-core machine (node's own start, the
 * migrations check, reading everything, the config apply and its announcements), so 10 s failed
 * now and then; the bound stays below the hooks' 30 s so a start that never comes still fails
 * with this message.
 */
const startWithinMs = 25_000;

/** Runs the real `gateway serve --json` binary and waits for its ready line. */
export async function serveProcess(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<ServeProcess> {
  const child = spawn(process.execPath, [bin, "serve", "--port", "0", "--json", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const line = await new Promise<string>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => {
      // A start that never came must not leave the process behind the test.
      child.kill("SIGKILL");
      reject(new Error(`gateway serve did not start: ${stderr}`));
    }, startWithinMs);
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, nl));
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`gateway serve exited with ${code}: ${stderr}`));
    });
  });
  const ready = JSON.parse(line) as ServeProcess["ready"];
  return {
    url: ready.url,
    child,
    ready,
    stderr: () => stderr,
    async stop(signal: NodeJS.Signals = "SIGTERM") {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const [code] = (await once(child, "exit")) as [number | null];
      return code;
    },
  };
}
