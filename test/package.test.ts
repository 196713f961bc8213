import { execFile } from "node:child_process";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * The package as a user installs it: `npm pack` of the built dist, unpacked into a consumer
 * project's node_modules next to the runtime dependencies only (no devDependencies such as
 * @types/better-sqlite3), then type-checked and run the ways users run it.
 */

const run = promisify(execFile);
const root = join(import.meta.dirname, "..");
const modules = join(root, "node_modules");
const runtimeDeps = Object.keys(
  (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { dependencies: object })
    .dependencies,
);

let consumer: string;

beforeAll(async () => {
  consumer = mkdtempSync(join(tmpdir(), "gateway-consumer-"));
  const { stdout } = await run(
    "npm",
    ["pack", "--ignore-scripts", "--silent", "--pack-destination", consumer],
    { cwd: root },
  );
  const tarball = join(consumer, stdout.trim().split("\n").pop() ?? "");
  const own = join(consumer, "node_modules", "model-gateway");
  mkdirSync(own, { recursive: true });
  await run("tar", ["xzf", tarball, "-C", own, "--strip-components=1"]);
  for (const dep of [...runtimeDeps, "@types/node"]) {
    const target = join(consumer, "node_modules", dep);
    mkdirSync(join(target, ".."), { recursive: true });
    symlinkSync(join(modules, dep), target);
  }
  writeFileSync(
    join(consumer, "package.json"),
    JSON.stringify({ name: "consumer", private: true, type: "module" }),
  );
  writeFileSync(join(consumer, "use.ts"), consumerSource);
  writeFileSync(join(consumer, "run.mjs"), runScript);
  writeFileSync(join(consumer, "run.cjs"), runScript.replace(importLines, requireLines));
  writeFileSync(join(consumer, "gateway.test.mjs"), vitestFile);
}, 60_000);

afterAll(() => rmSync(consumer, { recursive: true, force: true }));

const consumerSource = `import { type GatewayConfig, type RunningGateway, startGateway } from "model-gateway";

const config: GatewayConfig = {
  providers: [{ id: "m", wire: "mock" }],
  models: [{ name: "m", provider: "m" }],
  accounts: [{ id: "a", keys: [{ id: "k", value: "kn-consumer-key-0000000000000000" }] }],
};
const gateway: RunningGateway = await startGateway({ config, port: 0 });
const port: number = gateway.port;
// @ts-expect-error the server's internal services are not part of the published API
gateway.services;
await gateway.close();
export { port };
`;

const importLines = `import { existsSync, statSync } from "node:fs";
import { startGateway } from "model-gateway";`;
const requireLines = `const { existsSync, statSync } = require("node:fs");
const { startGateway } = require("model-gateway");`;

/**
 * Starts a gateway on a file database, waits for its main file to take the WAL's pages (only the
 * checkpointer moves them there this early), then one with no options, which must leave no
 * gateway.db in the working directory.
 */
const runScript = `${importLines}
async function main() {
  const gw = await startGateway({ db: "file.db" });
  let size = statSync("file.db").size;
  for (let i = 0; i < 100 && size <= 4096; i++) {
    await new Promise((r) => setTimeout(r, 50));
    size = statSync("file.db").size;
  }
  await gw.close();
  const plain = await startGateway();
  const res = await fetch(plain.url + "/v1/models", { headers: { authorization: "Bearer " + plain.demoKey } });
  await plain.close();
  console.log(JSON.stringify({ checkpointed: size > 4096, models: res.status, wroteDefaultDb: existsSync("gateway.db") }));
}
main();
`;

const vitestFile = `import { existsSync, statSync } from "node:fs";
import { expect, test } from "vitest";
import { startGateway } from "model-gateway";
test("the gateway starts, checkpoints and stops", async () => {
  const gw = await startGateway({ db: "vitest.db" });
  let size = statSync("vitest.db").size;
  for (let i = 0; i < 100 && size <= 4096; i++) {
    await new Promise((r) => setTimeout(r, 50));
    size = statSync("vitest.db").size;
  }
  await gw.close();
  expect(size).toBeGreaterThan(4096);
  expect(existsSync("gateway.db")).toBe(false);
});
`;

interface Ran {
  stdout: string;
  stderr: string;
}

/** Runs in the consumer project with the user's environment: no key store chosen (vitest's is not theirs). */
async function inConsumer(file: string, args: string[]): Promise<Ran> {
  rmSync(join(consumer, "gateway.db"), { force: true });
  for (const name of readdirSync(consumer))
    if (/^(file|vitest)\.db/.test(name)) rmSync(join(consumer, name));
  const env = { ...process.env };
  delete env.GATEWAY_SECRET_KEY_STORE;
  return run(file, args, { cwd: consumer, env, timeout: 60_000 });
}

describe("model-gateway as an installed dependency", () => {
  it("its types compile with skipLibCheck false and keep the internal services out", async () => {
    writeFileSync(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          target: "es2022",
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          types: ["node"],
        },
        files: ["use.ts"],
      }),
    );
    const tsc = join(modules, "typescript", "bin", "tsc");
    const done = await run(process.execPath, [tsc, "-p", consumer]).catch((err: Ran) => err);
    expect(`${done.stdout}${done.stderr}`).toBe("");
  }, 60_000);

  for (const [name, args] of [
    ["an ES module (node --input-type=module)", ["--input-type=module", "-e", "@run.mjs"]],
    ["an ES module file", ["run.mjs"]],
    ["a CommonJS file", ["run.cjs"]],
  ] as const) {
    it(`started from ${name}: the checkpoint runs, nothing complains, no gateway.db appears`, async () => {
      const argv = args.map((a) => (a === "@run.mjs" ? runScript : a));
      const done = await inConsumer(process.execPath, argv);
      expect(done.stderr).toBe("");
      expect(JSON.parse(done.stdout)).toEqual({
        checkpointed: true,
        models: 200,
        wroteDefaultDb: false,
      });
    }, 60_000);
  }

  it("started from a vitest test: the checkpoint runs and nothing complains", async () => {
    const vitest = join(modules, "vitest", "vitest.mjs");
    const done = await inConsumer(process.execPath, [
      vitest,
      "run",
      "--root",
      consumer,
      "gateway.test.mjs",
    ]);
    expect(done.stdout).toContain("1 passed");
    expect(`${done.stdout}${done.stderr}`).not.toContain("checkpointer stopped");
  }, 60_000);
});
