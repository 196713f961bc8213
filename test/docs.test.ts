import { execFile } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../src/server/config/load.js";
import { configSchema } from "../src/server/config/schema.js";
import { type RunningGateway, startGateway } from "../src/server/gateway.js";

/**
 * Every fenced code block of README.md and docs/*.md runs here, so none goes stale.
 *
 * - `json`: parses; a block whose keys are all config fields is validated as a gateway config
 *   (every `${NAME}` set to a distinct well-formed key).
 * - `ts`: type-checked in one `tsc` run (imports of `model-gateway` resolve to the package
 *   itself), then run. A `no-run` one is type-checked all the same, unless it says it is an
 *   excerpt (`ts no-run: an excerpt of ...`). `js`: run.
 * - `sh`: run by bash with `set -eo pipefail`.
 * - `text` or no language: output shown to the reader, not code.
 *
 * Blocks run against one gateway on the demo setup that this test starts, with the reader's
 * placeholders filled in: `$KEY` (and `process.env.KEY`) is its demo key, `http://127.0.0.1:8787`
 * its URL, `npx gateway` / `gateway` the repository's bin/gateway, and the current directory a
 * temporary one holding its database `gateway.db`. A `curl` fails the block on an HTTP error.
 * A block that cannot run says why in its fence: ```sh no-run: needs a real provider
 */

const root = resolve(import.meta.dirname, "..");
const DOCS_URL = "http://127.0.0.1:8787";
const proseLanguages = new Set(["", "text"]);
const codeLanguages = new Set(["json", "ts", "js", "sh"]);

interface Block {
  file: string;
  line: number;
  lang: string;
  noRun?: string;
  code: string;
}

function docFiles(): string[] {
  const docs = readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`);
  return ["README.md", ...docs.sort()];
}

/** Fenced blocks at the start of a line; the info string is the language and an optional marker. */
function blocksOf(file: string): Block[] {
  const lines = readFileSync(join(root, file), "utf8").split("\n");
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,}|~{3,})(.*)$/.exec(lines[i]);
    if (!open) continue;
    const fence = open[1];
    const info = open[2].trim();
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && !(lines[j].startsWith(fence) && lines[j].trim() === fence)) {
      body.push(lines[j]);
      j++;
    }
    const marker = /\bno-run\b:?(.*)$/.exec(info);
    blocks.push({
      file,
      line: i + 1,
      lang: info
        .split(/\s+/)[0]
        .replace(/^typescript$/, "ts")
        .replace(/^(bash|shell)$/, "sh"),
      noRun: marker ? marker[1].trim() : undefined,
      code: `${body.join("\n")}\n`,
    });
    i = j;
  }
  return blocks;
}

const files = docFiles();
const blocks = files.flatMap(blocksOf);
const name = (b: Block) => `${b.file}:${b.line} (${b.lang || "text"})`;
/** A ts block the type check covers: every one but an excerpt of a longer file. */
const typeChecked = (b: Block) => b.lang === "ts" && !/^an excerpt\b/.test(b.noRun ?? "");

// ---- placeholders -------------------------------------------------------------------------

let gateway: RunningGateway;
let workDir: string;
let binDir: string;
const blockDir = join(root, ".docs-blocks");
const typeErrors = new Map<string, string[]>();

function fillIn(code: string): string {
  return code.replaceAll(DOCS_URL, gateway.url);
}

const blockFile = (b: Block, ext: string) =>
  join(blockDir, `${b.file.replace(/[/.]/g, "_")}_${b.line}.${ext}`);

beforeAll(async () => {
  workDir = mkdtempSync(join(tmpdir(), "gateway-docs-"));
  gateway = await startGateway({ db: join(workDir, "gateway.db"), port: 0 });
  process.env.KEY = gateway.demoKey!;
  binDir = join(workDir, "bin");
  mkdirSync(binDir);
  writeFileSync(
    join(binDir, "gateway"),
    `#!/bin/sh\nexec "${process.execPath}" "${join(root, "bin/gateway")}" "$@"\n`,
  );
  chmodSync(join(binDir, "gateway"), 0o755);

  // One tsc run over every ts block, each a module of its own.
  rmSync(blockDir, { recursive: true, force: true });
  mkdirSync(blockDir);
  const ts = blocks.filter(typeChecked);
  for (const b of ts) writeFileSync(blockFile(b, "ts"), `${b.code}export {};\n`);
  writeFileSync(
    join(blockDir, "tsconfig.json"),
    JSON.stringify({
      extends: "../tsconfig.json",
      compilerOptions: { noEmit: true, rootDir: ".." },
      include: ["*.ts"],
    }),
  );
  const tsc = join(root, "node_modules/typescript/bin/tsc");
  const out = await run(process.execPath, [tsc, "-p", join(blockDir, "tsconfig.json")], root);
  for (const line of out.stdout.split("\n")) {
    const m = /^\.docs-blocks\/([^(]+)\(/.exec(line) ?? /^([^(]+\.ts)\(/.exec(line);
    if (!m) continue;
    const file = join(blockDir, m[1].replace(/^\.docs-blocks\//, ""));
    typeErrors.set(file, [...(typeErrors.get(file) ?? []), line]);
  }
  if (out.code !== 0 && typeErrors.size === 0) throw new Error(`tsc failed:\n${out.stdout}`);
}, 180_000);

afterAll(async () => {
  await gateway?.close();
  rmSync(blockDir, { recursive: true, force: true });
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

function run(
  command: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(command, args, { cwd, env, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
      done({ code, stdout, stderr });
    });
  });
}

// ---- the blocks -----------------------------------------------------------------------------

describe("every code block of the README and docs", () => {
  it("finds blocks in the README and in docs/", () => {
    expect(blocks.filter((b) => b.file === "README.md").length).toBeGreaterThan(3);
    expect(new Set(blocks.map((b) => b.file)).size).toBeGreaterThan(5);
  });

  for (const b of blocks) {
    if (proseLanguages.has(b.lang) && b.noRun === undefined) continue;
    it(name(b), async () => {
      if (b.noRun !== undefined) {
        // The marker is for the reader too: it says what the block needs.
        expect(b.noRun, "a no-run block names its reason: no-run: <reason>").toMatch(/\S{3,}/);
        // It is not run, but a reader copies it: it compiles against the package's types.
        if (typeChecked(b))
          expect(typeErrors.get(blockFile(b, "ts")) ?? [], "type errors").toEqual([]);
        return;
      }
      expect(codeLanguages.has(b.lang), `language "${b.lang}": run it here or mark it no-run`).toBe(
        true,
      );
      if (b.lang === "json") return checkJson(b);
      if (b.lang === "ts") {
        expect(typeErrors.get(blockFile(b, "ts")) ?? [], "type errors").toEqual([]);
        return runModule(b, "ts");
      }
      if (b.lang === "js") return runModule(b, "mjs");
      return runShell(b);
    }, 90_000);
  }
});

function checkJson(b: Block) {
  const value = JSON.parse(b.code) as unknown;
  const configKeys = Object.keys(configSchema.shape);
  const isConfig =
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    Object.keys(value).length > 0 &&
    Object.keys(value).every((k) => configKeys.includes(k));
  if (!isConfig) return;
  const env: NodeJS.ProcessEnv = {};
  for (const [, variable] of b.code.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g))
    env[variable] = `kn-docs-${variable.toLowerCase().replace(/_/g, "-")}-0000000000000000`;
  expect(() => parseConfig(value, env, name(b))).not.toThrow();
}

async function runModule(b: Block, ext: "ts" | "mjs") {
  const file = join(blockDir, `run_${relative(blockDir, blockFile(b, ext))}`);
  const source = fillIn(b.code).replaceAll(
    /from "model-gateway"/g,
    `from ${JSON.stringify(join(root, "src/index.ts"))}`,
  );
  writeFileSync(file, source);
  const cwd = process.cwd();
  process.chdir(workDir);
  try {
    await import(pathToFileURL(file).href);
  } finally {
    process.chdir(cwd);
  }
}

async function runShell(b: Block) {
  // `npx gateway` would look the name up in the registry outside the repository.
  const code = fillIn(b.code).replace(/\bnpx gateway\b/g, "gateway");
  const script = `curl() { command curl -sS --fail-with-body "$@"; }\n${code}`;
  const result = await run("bash", ["-eo", "pipefail", "-c", script], workDir, {
    ...process.env,
    PATH: `${binDir}:${process.env.PATH}`,
    KEY: gateway.demoKey!,
  });
  expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
}

// ---- links ------------------------------------------------------------------------------

/**
 * GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered.
 * With `level`, only the anchors of headings of that level.
 */
function anchorsOf(file: string, level?: number): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let inBlock = false;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (/^(`{3,}|~{3,})/.test(line)) inBlock = !inBlock;
    const heading = !inBlock && /^(#{1,6}) (.*)$/.exec(line);
    if (!heading) continue;
    const base = heading[2]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, "")
      .replace(/ /g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    if (level === undefined || heading[1].length === level)
      anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

function linksOf(file: string): string[] {
  const text = readFileSync(join(root, file), "utf8")
    .replace(/^(`{3,})[^\n]*\n[\s\S]*?^\1\s*$/gm, "")
    .replace(/`[^`\n]*`/g, "");
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
}

describe("the README is the map", () => {
  it("is at most 300 lines, and starts with the two commands .ci/run also runs", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    expect(readme.split("\n").length).toBeLessThanOrEqual(300);
    const first = blocks.find((b) => b.file === "README.md")!;
    expect(first.code).toBe("npm ci && npx gateway serve\nnpm test\n");
    expect(readFileSync(join(root, ".ci/run"), "utf8")).toMatch(/\bnpm test\b/);
  });

  it("links every guide in docs/", () => {
    const links = new Set(linksOf("README.md").map((l) => l.split("#")[0]));
    for (const file of files.filter((f) => f.startsWith("docs/"))) expect(links).toContain(file);
  });

  it("every guide says what it is for, in prose, before its contents", () => {
    for (const file of files.filter((f) => f.startsWith("docs/"))) {
      const lines = readFileSync(join(root, file), "utf8").split("\n");
      const contents = lines.findIndex((l) => /^- \[/.test(l) || l === "## Contents");
      const opening = lines.slice(1, contents).filter((l) => /^[A-Za-z`*]/.test(l));
      expect(
        opening.join(" ").split(/\s+/).length,
        `${file}: a sentence under its title`,
      ).toBeGreaterThan(8);
    }
  });

  it("every section of a guide is in its contents", () => {
    for (const file of files.filter((f) => f.startsWith("docs/"))) {
      const text = readFileSync(join(root, file), "utf8");
      const [head, first = ""] = text.split(/^## /m);
      const toc = new Set(
        [...(head + (first.startsWith("Contents") ? first : "")).matchAll(/\]\(#([^)]+)\)/g)].map(
          (m) => m[1],
        ),
      );
      const sections = [...anchorsOf(join(root, file), 2)].filter((a) => a !== "contents");
      expect(
        sections.filter((a) => !toc.has(a)),
        `${file}: its ## sections missing from its contents`,
      ).toEqual([]);
    }
  });

  it("every guide opens with a table of contents", () => {
    for (const file of files.filter((f) => f.startsWith("docs/"))) {
      // Links to its own headings before its second section.
      const [head, first = ""] = readFileSync(join(root, file), "utf8").split(/^## /m);
      const toc = (head + first).match(/\]\(#[^)]+\)/g) ?? [];
      expect(
        toc.length,
        `${file}: a list of links to its sections near the top`,
      ).toBeGreaterThanOrEqual(3);
    }
  });

  for (const file of files) {
    it(`every relative link of ${file} resolves to a file and anchor`, () => {
      const broken: string[] = [];
      for (const link of linksOf(file)) {
        if (/^[a-z]+:/i.test(link)) continue;
        const [path, anchor] = link.split("#");
        const target = path === "" ? join(root, file) : resolve(root, dirname(file), path);
        if (!existsSync(target)) {
          broken.push(`${link}: no such file`);
          continue;
        }
        if (anchor !== undefined && target.endsWith(".md") && !anchorsOf(target).has(anchor))
          broken.push(`${link}: no heading with that anchor`);
      }
      expect(broken).toEqual([]);
    });
  }
});
