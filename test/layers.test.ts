import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, posix, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * Data flows one way: request -> auth -> limits/billing -> dispatch -> providers -> wire -> upstream
 * -> store.
 * These tests read every import of src/ (type-only ones too: they couple the modules as much for
 * a reader) and fail on an import cycle or an import that runs back up the layers.
 */

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Every `.ts` file under src/, as a path from the repository root with forward slashes. */
function sourceFiles(folder: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(join(root, folder), { withFileTypes: true })) {
    const path = posix.join(folder, entry.name);
    if (entry.isDirectory()) files.push(...sourceFiles(path));
    else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) files.push(path);
  }
  return files;
}

const staticImport = /^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gm;
const bareImport = /^\s*import\s*["']([^"']+)["']/gm;
const dynamicImport = /\bimport\(\s*["']([^"']+)["']\s*\)/g;

/** The src/ modules a file imports (tests excluded: they may reach anywhere). */
function importsOf(file: string, known: Set<string>): string[] {
  const text = readFileSync(join(root, file), "utf8");
  const targets = new Set<string>();
  for (const pattern of [staticImport, bareImport, dynamicImport]) {
    for (const match of text.matchAll(pattern)) {
      const specifier = match[1];
      if (!specifier.startsWith(".")) continue;
      const target = posix.join(posix.dirname(file), specifier).replace(/\.js$/, ".ts");
      if (known.has(target)) targets.add(target);
      else if (known.has(`${target}/index.ts`)) targets.add(`${target}/index.ts`);
      else throw new Error(`${file} imports ${specifier}, which is no module under src/`);
    }
  }
  return [...targets];
}

const modules = sourceFiles("src").filter((file) => !file.endsWith(".test.ts"));
const known = new Set(modules);
const graph = new Map(modules.map((file) => [file, importsOf(file, known)]));

/**
 * The folder of a module: `src/server/routes/`, `src/store/sqlite/`; a file directly under
 * `src/server/`, `src/store/` or `src/` is its own.
 */
function folderOf(file: string): string {
  const parts = file.split("/");
  const depth = parts[1] === "server" || parts[1] === "store" ? 3 : 2;
  return parts.length > depth ? `${parts.slice(0, depth).join("/")}/` : file;
}

/** Folder to folder: an edge wherever a module of one imports a module of the other. */
const folderGraph = new Map<string, string[]>();
for (const [file, targets] of graph) {
  const from = folderOf(file);
  const next = new Set(folderGraph.get(from));
  for (const target of targets) if (folderOf(target) !== from) next.add(folderOf(target));
  folderGraph.set(from, [...next]);
}

/** The cycles depth-first search meets, each as the path that closes it (`a -> b -> a`). */
function cycles(edges: Map<string, string[]>): string[] {
  const found: string[] = [];
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (file: string) => {
    state.set(file, "open");
    path.push(file);
    for (const next of edges.get(file) ?? []) {
      const seen = state.get(next);
      if (seen === "open") found.push([...path.slice(path.indexOf(next)), next].join(" -> "));
      else if (seen === undefined) visit(next);
    }
    path.pop();
    state.set(file, "done");
  };
  for (const file of edges.keys()) if (!state.has(file)) visit(file);
  return found;
}

function reaches(from: string, to: string): boolean {
  const seen = new Set([from]);
  const queue = [from];
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    if (file === to) return true;
    for (const next of graph.get(file) ?? []) {
      if (!seen.has(next)) {
        seen.add(next);
        queue.push(next);
      }
    }
  }
  return false;
}

interface LayerRule {
  /** The importing modules, by path prefix. */
  from: string;
  /** Importing modules under `from` that the rule leaves out, by path prefix. */
  except?: string[];
  /** Path prefixes they must not import. */
  forbidden: string[];
}

const server = (...folders: string[]) => folders.map((folder) => `src/server/${folder}/`);

/** What sits above the request's path: the composition, the app, the pages and the endpoints. */
const composition = [
  ...server("routes", "dashboard", "compose", "backends", "jobs", "mcp", "kit"),
  "src/server/app.ts",
  "src/server/gateway.ts",
];

const rules: LayerRule[] = [
  { from: "src/store/", forbidden: ["src/server/", "src/cli/"] },
  // store/ holds the interfaces and what both backends share; each backend is its own folder.
  {
    from: "src/store/",
    except: ["src/store/sqlite/", "src/store/postgres/"],
    forbidden: ["src/store/sqlite/", "src/store/postgres/"],
  },
  { from: "src/store/sqlite/", forbidden: ["src/store/postgres/"] },
  { from: "src/store/postgres/", forbidden: ["src/store/sqlite/"] },
  // The server sees the store's interfaces: only what opens a backend, and the ledger that runs on
  // each, names a backend's classes.
  {
    from: "src/server/",
    except: [...server("backends", "billing"), "src/server/gateway.ts"],
    forbidden: ["src/store/sqlite/", "src/store/postgres/"],
  },
  // The request's path, top down: auth -> limits/billing -> dispatch -> providers -> wire.
  {
    from: "src/server/auth/",
    forbidden: [...composition, ...server("billing", "dispatch", "providers", "wire")],
  },
  { from: "src/server/billing/", forbidden: [...composition, ...server("auth")] },
  {
    from: "src/server/limits/",
    forbidden: [...composition, ...server("auth", "billing", "dispatch")],
  },
  {
    from: "src/server/dispatch/",
    forbidden: [...composition, ...server("auth", "billing", "limits")],
  },
  {
    from: "src/server/providers/",
    forbidden: [...composition, ...server("auth", "billing", "limits", "dispatch")],
  },
  {
    from: "src/server/http/",
    forbidden: [...composition, ...server("auth", "billing", "limits", "dispatch", "providers")],
  },
  {
    from: "src/server/wire/",
    forbidden: [
      ...composition,
      ...server("auth", "billing", "limits", "dispatch", "providers", "http"),
    ],
  },
  // The media formats the gateway reads and writes (WAV, PNG, AVI): for routes and providers alike.
  {
    from: "src/server/media/",
    forbidden: [
      ...composition,
      ...server("auth", "billing", "limits", "dispatch", "providers", "http", "wire", "time"),
    ],
  },
  // Clocks, waits and the signal that ends them: under everything.
  {
    from: "src/server/time/",
    forbidden: [
      ...composition,
      ...server("auth", "billing", "limits", "dispatch", "providers", "http", "wire"),
    ],
  },
  { from: "src/server/", forbidden: ["src/cli/"] },
];

/**
 * Edges allowed to break a rule or close a cycle. An entry nothing needs any more fails the test,
 * so the list only shrinks; it is empty, and a new entry needs a reason beside it.
 */
const allowed = new Set<string>([]);

const edgeOf = (from: string, to: string) => `${from} -> ${to}`;

function violations(): string[] {
  const found: string[] = [];
  for (const [file, targets] of graph) {
    for (const rule of rules) {
      if (!file.startsWith(rule.from)) continue;
      if (rule.except?.some((prefix) => file.startsWith(prefix))) continue;
      for (const target of targets) {
        if (rule.forbidden.some((prefix) => target.startsWith(prefix))) {
          found.push(edgeOf(file, target));
        }
      }
    }
  }
  return [...new Set(found)];
}

describe("the import graph of src/", () => {
  it("resolves every relative import to a module under src/", () => {
    expect(modules.length).toBeGreaterThan(50);
    expect(graph.get("src/server/gateway.ts")?.length).toBeGreaterThan(0);
  });

  it("has no import cycle", () => {
    const kept = new Map(
      [...graph].map(([file, targets]) => [
        file,
        targets.filter((target) => !allowed.has(edgeOf(file, target))),
      ]),
    );
    const found = cycles(kept);
    expect(found, `import cycles:\n${found.join("\n")}`).toEqual([]);
  });

  it("has no cycle between folders either: each folder imports the next one way only", () => {
    const found = cycles(folderGraph);
    expect(found, `folder cycles:\n${found.join("\n")}`).toEqual([]);
  });

  it("imports only down the layers: auth, billing, limits, dispatch, providers, http, wire, time and store never reach up", () => {
    const found = violations().filter((edge) => !allowed.has(edge));
    expect(found, `imports against the layers:\n${found.join("\n")}`).toEqual([]);
  });

  it("allows only edges that still break a layer rule or close a cycle", () => {
    const broken = new Set(violations());
    const stale = [...allowed].filter((edge) => {
      const [from, to] = edge.split(" -> ");
      return !broken.has(edge) && !(graph.get(from)?.includes(to) && reaches(to, from));
    });
    expect(stale, `allow-list entries nothing needs any more:\n${stale.join("\n")}`).toEqual([]);
  });

  it("reaches a provider only through providers/: no module outside it imports a provider's folder", () => {
    // A wire's folder is its own business: the rest of the gateway sees the interface
    // (provider.ts), the registry and the shared upstream code beside them.
    const providerFolder = /^src\/server\/providers\/[^/]+\//;
    const found = [...graph].flatMap(([file, targets]) =>
      file.startsWith("src/server/providers/")
        ? []
        : targets.filter((target) => providerFolder.test(target)).map((t) => edgeOf(file, t)),
    );
    expect(found, `imports of a provider's folder:\n${found.join("\n")}`).toEqual([]);
  });

  it("asks a provider's registry entry what it can do, never which wire it speaks", () => {
    // A new wire is a folder and a registry line only if nothing outside providers/ names one.
    const asks =
      /\.wire\s*[!=]==|\bwire\s*===\s*["']|["'](?:openai|anthropic|mock|gemini)["']\s*===\s*\w*\.?wire/;
    const found = modules.filter(
      (file) =>
        !file.startsWith("src/server/providers/") &&
        readFileSync(join(root, file), "utf8")
          .split("\n")
          .some((line) => asks.test(line)),
    );
    expect(found, `modules that branch on a provider's wire:\n${found.join("\n")}`).toEqual([]);
  });
  it("waits on the host's timers (host-timers.ts), which an app's fake timers do not replace", () => {
    // A gateway of startGateway runs in the test suite's process: a global setTimeout read at the
    // call is the app's fake one once it calls vi.useFakeTimers(), and the gateway would stall.
    const call = /(?<![.\w])(?:setTimeout|setInterval|setImmediate)\((?!\))/;
    const found = modules.filter(
      (file) =>
        (file.startsWith("src/server/") || file.startsWith("src/store/")) &&
        !file.endsWith(".test.ts") &&
        call.test(readFileSync(join(root, file), "utf8")) &&
        !readFileSync(join(root, file), "utf8").includes("host-timers.js"),
    );
    expect(found, `modules that call the global timers:\n${found.join("\n")}`).toEqual([]);
  });
});
