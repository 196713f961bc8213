import { networkInterfaces } from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import { type CliHome, cliHome, killRunningClis, runCli, spawnCli } from "./support/cli.js";

/** What `gateway serve` prints when it cannot start, and when it listens beyond loopback. */

const homes: CliHome[] = [];
afterEach(() => {
  killRunningClis();
  for (const h of homes.splice(0)) h.remove();
});

function newHome(): CliHome {
  const home = cliHome();
  homes.push(home);
  return home;
}

describe("serve errors", () => {
  it('says "no such file or directory" for a missing config, never ENOENT, and what to do', async () => {
    const home = newHome();
    const done = await runCli(
      ["serve", "--port", "0", "--db", ":memory:", "--config", `${home.dir}/missing.json`],
      home.env,
    );
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(
      `gateway: invalid config:\n  - cannot read ${home.dir}/missing.json: no such file or directory; write it (every field, with its default, is in docs/configuration.md) or give the path of yours\n`,
    );
  });

  it("names a --db whose directory does not exist, in one line", async () => {
    const home = newHome();
    const db = `${home.dir}/nowhere/gateway.db`;
    const done = await runCli(["serve", "--port", "0", "--db", db], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(`gateway: no such directory: ${home.dir}/nowhere (for --db ${db})\n`);
  });

  it("reports a missing environment variable once, with every place that uses it", async () => {
    const home = newHome();
    const { writeFileSync } = await import("node:fs");
    const config = `${home.dir}/env.json`;
    const ref = "$" + "{GW_TEST_UNSET_KEY}";
    writeFileSync(
      config,
      JSON.stringify({
        providers: [
          { id: "o", wire: "openai", base_url: "http://127.0.0.1:1/v1", api_keys: [ref, ref] },
        ],
        models: [],
        accounts: [],
      }),
    );
    const done = await runCli(
      ["serve", "--port", "0", "--db", ":memory:", "--config", config],
      home.env,
    );
    expect(done.code).toBe(1);
    expect(done.stderr.match(/GW_TEST_UNSET_KEY/g)).toHaveLength(1);
    expect(done.stderr).toContain(
      "environment variable GW_TEST_UNSET_KEY is not set (used at providers[0].api_keys[0], providers[0].api_keys[1])",
    );
  });
});

describe("serve --host 0.0.0.0", () => {
  it("warns that the dashboard and API are reachable from the network and prints a reachable URL", async () => {
    const home = newHome();
    const serve = spawnCli(
      ["serve", "--port", "0", "--host", "0.0.0.0", "--db", ":memory:", "--json"],
      home.env,
    );
    const [line] = await serve.waitFor(/^\{.*\}$/m);
    const ready = JSON.parse(line) as { url: string; port: number; network_url?: string };
    await serve.waitFor(/warning/);
    const external = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a !== undefined && !a.internal)
      .map((a) => a!.address);
    if (external.length > 0) {
      expect(
        external.map((a) => `http://${a.includes(":") ? `[${a}]` : a}:${ready.port}`),
      ).toContain(ready.network_url);
      expect((await fetch(`${ready.network_url}/health`)).status).toBe(200);
    } else {
      expect(ready.network_url).toBeUndefined();
    }
    expect(serve.stderr()).toContain(
      `gateway: warning: listening on 0.0.0.0, so the dashboard and the API are reachable from the network: ${ready.network_url ?? "(no network interface is up on this machine right now)"}`,
    );
    // The local URL still works.
    expect((await fetch(`${ready.url}/health`)).status).toBe(200);
    serve.child.kill("SIGTERM");
    await serve.exit();
  });

  it("prints no warning on loopback", async () => {
    const home = newHome();
    const serve = spawnCli(["serve", "--port", "0", "--db", ":memory:", "--json"], home.env);
    const [line] = await serve.waitFor(/^\{.*\}$/m);
    expect(JSON.parse(line)).not.toHaveProperty("network_url");
    serve.child.kill("SIGTERM");
    const done = await serve.exit();
    expect(done.stderr).not.toContain("warning");
  });
});
