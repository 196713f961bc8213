import { readdirSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { type CliHome, cliHome, killRunningClis, runCli } from "./support/cli.js";
import { LOGIN_KEY, type TestGateway, testGateway } from "./support/gateway.js";

let gw: TestGateway | undefined;
let home: CliHome | undefined;

afterEach(async () => {
  killRunningClis();
  home?.remove();
  home = undefined;
  await gw?.close();
  gw = undefined;
});

/** Every file under `dir`, as paths below it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => entry.name);
}

async function toolsListStatus(url: string, key: string): Promise<number> {
  const res = await fetch(url, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }),
  });
  return res.status;
}

async function keyLabels(): Promise<string[]> {
  const res = await fetch(`${gw!.url}/api/keys`, {
    headers: { authorization: `Bearer ${LOGIN_KEY}` },
  });
  return ((await res.json()) as { data: { label: string }[] }).data.map((k) => k.label);
}

describe("gateway mcp", () => {
  it("prints a ready snippet for each agent with a key minted for it, never the login key, and writes no config", async () => {
    gw = await testGateway();
    home = cliHome({ GATEWAY_API_KEY: LOGIN_KEY, GATEWAY_BASE_URL: gw.url });
    const before = filesUnder(home.dir);
    const ran = await runCli(["mcp"], home.env);
    expect(ran.code).toBe(0);
    const out = ran.stdout + ran.stderr;
    expect(out).not.toContain(LOGIN_KEY);
    const url = `${gw.url}/mcp`;

    const claude = new RegExp(
      `^claude mcp add --transport http model-gateway ${url} --header "Authorization: Bearer (kn-[A-Za-z0-9_-]+)"$`,
      "m",
    ).exec(ran.stdout);
    const codex = new RegExp(
      `^\\[mcp_servers\\.model-gateway\\]\\nurl = "${url}"\\nhttp_headers = \\{ "Authorization" = "Bearer (kn-[A-Za-z0-9_-]+)" \\}$`,
      "m",
    ).exec(ran.stdout);
    const jsons = [...ran.stdout.matchAll(/^\{\n[\s\S]*?\n\}$/gm)].map(
      (m) =>
        JSON.parse(m[0]) as Record<
          string,
          Record<string, { url: string; headers: Record<string, string>; type?: string }>
        >,
    );
    expect(claude).not.toBeNull();
    expect(codex).not.toBeNull();
    expect(jsons).toHaveLength(2);
    const cursor = jsons[0]!.mcpServers!["model-gateway"]!;
    const vscode = jsons[1]!.servers!["model-gateway"]!;
    expect(cursor.url).toBe(url);
    expect(vscode).toMatchObject({ type: "http", url });

    const keys = [
      claude![1]!,
      codex![1]!,
      cursor.headers.Authorization!.replace("Bearer ", ""),
      vscode.headers.Authorization!.replace("Bearer ", ""),
    ];
    expect(new Set(keys).size).toBe(4);
    for (const key of keys) expect(await toolsListStatus(url, key)).toBe(200);
    expect((await keyLabels()).filter((label) => label.endsWith("-mcp")).sort()).toEqual([
      "claude-code-mcp",
      "codex-mcp",
      "cursor-mcp",
      "vscode-mcp",
    ]);
    // Nothing was written: no agent's config, no credentials (the key came from the environment).
    expect(filesUnder(home.dir)).toEqual(before);
  });

  it("prints only the agents asked for, and refuses one it does not know", async () => {
    gw = await testGateway();
    home = cliHome({ GATEWAY_API_KEY: LOGIN_KEY });
    const ran = await runCli(["mcp", "claude-code", "--base-url", gw.url, "--json"], home.env);
    expect(ran.code).toBe(0);
    const printed = JSON.parse(ran.stdout) as { client: string; label: string; snippet: string }[];
    expect(printed.map((p) => [p.client, p.label])).toEqual([["claude-code", "claude-code-mcp"]]);
    expect(printed[0]!.snippet).toMatch(/^claude mcp add --transport http /);

    const wrong = await runCli(["mcp", "emacs", "--base-url", gw.url], home.env);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(
      /unknown agent "emacs"; choose from claude-code, codex, cursor, vscode/,
    );
    expect((await keyLabels()).filter((label) => label.endsWith("-mcp"))).toEqual([
      "claude-code-mcp",
    ]);
  });
});
