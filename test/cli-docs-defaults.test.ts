import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Command } from "commander";
import { describe, expect, it } from "vitest";
import { registerServe } from "../src/cli/serve.js";

/**
 * docs/cli.md's table of `gateway serve`'s flags against the command itself: a default the table
 * gives as a plain value (a number or a word) is the one serve has, so the two cannot drift (the
 * table once said 512 connections per address where serve took 128).
 */

function serveOptions() {
  const program = new Command();
  registerServe(program);
  const serve = program.commands.find((command) => command.name() === "serve");
  if (!serve) throw new Error("no serve command");
  return serve.options;
}

function documentedDefaults(): Map<string, string> {
  const text = readFileSync(join(import.meta.dirname, "..", "docs", "cli.md"), "utf8");
  const rows = new Map<string, string>();
  // A row names the flag, after its short form if it has one: `--db`, `-p, --port`.
  for (const match of text.matchAll(/^\| `(?:-[a-zA-Z], )?(--[a-z-]+)` \| ([^|]*) \|/gm)) {
    const value = match[2].trim();
    if (/^[\w.]+$/.test(value)) rows.set(match[1], value);
  }
  return rows;
}

describe("docs/cli.md's serve flags", () => {
  it("give the defaults gateway serve has", () => {
    const documented = documentedDefaults();
    const options = serveOptions();
    const compared: string[] = [];
    for (const [flag, value] of documented) {
      const option = options.find((o) => o.long === flag);
      expect(option, `${flag} is in cli.md but not a serve flag`).toBeDefined();
      if (option?.defaultValue === undefined) continue;
      expect(`${flag} ${String(option.defaultValue)}`).toBe(`${flag} ${value}`);
      compared.push(flag);
    }
    // The table's plain defaults are checked, not skipped: the port, the timers, the caps.
    expect(compared).toEqual(
      expect.arrayContaining(["--port", "--keepalive-ms", "--max-connections-per-ip"]),
    );
  });
});

describe("gateway serve --help", () => {
  it("sends --config to docs/configuration.md, and every page a flag names is there", () => {
    const options = serveOptions();
    expect(options.find((o) => o.long === "--config")?.description).toContain(
      "docs/configuration.md",
    );
    const named = options.flatMap((o) => [...o.description.matchAll(/docs\/[\w.-]+\.md/g)]);
    for (const [page] of named)
      expect(existsSync(join(import.meta.dirname, "..", page)), page).toBe(true);
  });
});
