import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type CliHome, cliHome, killRunningClis, runCli } from "./support/cli.js";

/** Ordinary mistakes on the command line: one clear line on stderr and exit code 2, never a crash. */

let home: CliHome;
beforeEach(() => {
  home = cliHome();
});
afterEach(() => {
  killRunningClis();
  home.remove();
});

async function mistake(args: string[]) {
  const done = await runCli(args, home.env);
  const lines = done.stderr.split("\n").filter(Boolean);
  return { code: done.code, lines, stdout: done.stdout, stderr: done.stderr };
}

function expectOneLine(
  got: { code: number | null; lines: string[]; stderr: string },
  text: string,
) {
  expect(got.stderr).not.toMatch(/unexpected error|please report/i);
  expect(got.code).toBe(2);
  expect(got.lines).toEqual([text]);
}

describe("serve: a flag value it cannot use", () => {
  it("--port out of range", async () => {
    expectOneLine(
      await mistake(["serve", "--port", "99999", "--db", ":memory:"]),
      "gateway: --port must be 0 to 65535, got 99999",
    );
  });

  it("--db on a file that is not a database, for serve and for the commands that open it", async () => {
    const file = join(home.dir, "notes.txt");
    writeFileSync(file, "these are my notes, not a database\n".repeat(20));
    const line = `gateway: --db ${file} is not a gateway database (not an SQLite file); give another file, or a new name to create one`;
    expectOneLine(await mistake(["serve", "--port", "0", "--db", file]), line);
    expectOneLine(await mistake(["keys", "create", "--db", file]), line);
    expectOneLine(await mistake(["owner-link", "--db", file]), line);
  });

  it("--db on a directory", async () => {
    const dir = join(home.dir, "data");
    mkdirSync(dir);
    const line = `gateway: --db ${dir} is a directory; give a database file, such as --db ${join(dir, "gateway.db")}`;
    expectOneLine(await mistake(["serve", "--port", "0", "--db", dir]), line);
    expectOneLine(await mistake(["keys", "create", "--db", dir]), line);
    expectOneLine(await mistake(["secrets", "rotate", "--db", dir]), line);
  });

  it("--host that is not an address of this machine", async () => {
    expectOneLine(
      await mistake(["serve", "--port", "0", "--db", ":memory:", "--host", "999.1.1.1"]),
      "gateway: cannot listen on --host 999.1.1.1: it is not an address of this machine (127.0.0.1 for this machine only, 0.0.0.0 for every interface)",
    );
  });
});

describe("an unknown command or flag", () => {
  it("names the closest command, without the whole help", async () => {
    const got = await mistake(["serv"]);
    expectOneLine(got, "gateway: unknown command 'serv' (did you mean serve?)");
    expect(got.stdout).toBe("");
    expectOneLine(
      await mistake(["keys", "craete"]),
      "gateway: unknown command 'craete' (did you mean create?)",
    );
  });

  it("names the closest flag", async () => {
    expectOneLine(
      await mistake(["serve", "--prot", "8080"]),
      "gateway: unknown option '--prot' (did you mean --port?)",
    );
  });

  it("a value outside a flag's choices is one line too; --help still exits 0", async () => {
    expectOneLine(
      await mistake(["serve", "--log-format", "xml"]),
      "gateway: option '--log-format <format>' argument 'xml' is invalid. Allowed choices are text, json.",
    );
    const help = await runCli(["serve", "--help"], home.env);
    expect(help.code).toBe(0);
    // Run from the clone, so help names the CLI as npx runs it.
    expect(help.stdout).toMatch(/Usage: npx gateway serve/);
  });
});
