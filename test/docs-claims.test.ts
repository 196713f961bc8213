import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configSchema } from "../src/server/config/schema.js";
import { startGateway } from "../src/server/gateway.js";
import { defaultMaxStreamMs } from "../src/server/providers/http-upstream.js";
import { defaultMaxEventBytes } from "../src/server/wire/sse.js";
import { killRunningClis, runCli } from "./support/cli.js";

/**
 * Claims of README.md and docs/*.md held to the code as it runs: tables checked mechanically
 * (every route the prose names, every config field and its default), and single claims a user
 * acts on checked over real HTTP or through `node bin/gateway`.
 */

const root = join(import.meta.dirname, "..");
const docFiles = [
  "README.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
const read = (file: string) => readFileSync(join(root, file), "utf8");

describe("every `METHOD /path` the docs name", () => {
  let served: Array<[string, RegExp]>;
  beforeAll(async () => {
    const gateway = await startGateway({ config: { providers: [{ id: "mock", wire: "mock" }] } });
    try {
      const doc = (await (await fetch(`${gateway.url}/openapi.json`)).json()) as {
        paths: Record<string, Record<string, unknown>>;
      };
      served = [];
      for (const [path, ops] of Object.entries(doc.paths)) {
        const pattern = new RegExp(`^${path.replace(/\{[^}]+\}/g, "[^/]+")}$`);
        for (const method of Object.keys(ops)) served.push([method.toUpperCase(), pattern]);
      }
    } finally {
      await gateway.close();
    }
    // The pages, which /openapi.json leaves out (they are HTML, not the API).
    served.push(
      ["GET", /^\/$/],
      ["GET", /^\/openapi\.json$/],
      ["GET", /^\/dashboard(\/.*)?$/],
      ["POST", /^\/dashboard\/.+$/],
    );
  });

  it("is a route the gateway registers (README.md and docs/*.md)", () => {
    const missing: string[] = [];
    let checked = 0;
    for (const file of docFiles) {
      read(file)
        .split("\n")
        .forEach((line, i) => {
          const pattern =
            /\b((?:GET|POST|PUT|PATCH|DELETE)(?:\/(?:GET|POST|PUT|PATCH|DELETE))*) (\/[A-Za-z0-9_/{}:.\-<>]*)/g;
          for (const m of line.matchAll(pattern)) {
            const path = m[2].replace(/[.,:]+$/, "");
            // `GET /v1/videos/{generations,extensions}` style and `/api/admin/...` are families.
            if (path.includes("...") || /\{[a-z]+,/.test(line.slice(m.index))) continue;
            const concrete = path.replace(/\{[^}]+\}|<[^>]+>|:[a-zA-Z]+/g, "x");
            for (const method of m[1].split("/")) {
              checked++;
              if (!served.some(([sm, re]) => sm === method && re.test(concrete)))
                missing.push(`${file}:${i + 1}: ${method} ${path}`);
            }
          }
        });
    }
    expect(checked).toBeGreaterThan(100);
    expect(missing).toEqual([]);
  });
});

describe("docs/configuration.md's field tables", () => {
  const text = read("docs/configuration.md");
  /** section heading -> rows of [field, documented default] */
  const tables = new Map<string, Array<[string, string]>>();
  let section = "";
  for (const line of text.split("\n")) {
    const heading = line.match(/^### (.*)$/);
    if (heading) {
      section = heading[1];
      tables.set(section, []);
      continue;
    }
    const row = line.match(/^\| `([a-z_.]+)`(?:, `([a-z_]+)`)? \|([^|]*)\|/);
    if (row && section) {
      tables.get(section)?.push([row[1], row[3].trim()]);
      if (row[2]) tables.get(section)?.push([row[2], row[3].trim()]);
    }
  }
  const parsed = configSchema.parse({
    providers: [{ id: "p", wire: "mock" }],
    models: [{ name: "m", provider: "p" }],
    routes: [{ name: "r", steps: ["m"] }],
    tiers: { t: { free_rpm: 1, free_daily: 1 } },
    accounts: [{ id: "a" }],
  });
  const objects: Record<string, { parsed: object; shape: Record<string, unknown> }> = {
    "Top level": { parsed: configSchema.parse({}), shape: configSchema.shape },
    "`providers[]`": {
      parsed: parsed.providers[0],
      shape: configSchema.shape.providers.unwrap().element.shape,
    },
    "`models[]`": {
      parsed: parsed.models[0],
      shape: configSchema.shape.models.unwrap().element.shape,
    },
    "`routes[]`": {
      parsed: parsed.routes[0],
      shape: configSchema.shape.routes.unwrap().element.shape,
    },
    "`tiers.<name>`": {
      parsed: parsed.tiers.t,
      shape: configSchema.shape.tiers.unwrap().valueType.shape,
    },
    "`accounts[]`": {
      parsed: parsed.accounts[0],
      shape: configSchema.shape.accounts.unwrap().element.shape,
    },
  };
  // Defaults the code applies at use rather than in the schema.
  const appliedLater: Record<string, number> = {
    max_stream_ms: defaultMaxStreamMs,
    max_event_bytes: defaultMaxEventBytes,
  };

  it("list every field of the schema, and only those", () => {
    for (const [section, { shape }] of Object.entries(objects)) {
      const documented = (tables.get(section) ?? []).map(([f]) => f.split(".")[0]);
      expect(new Set(documented), section).toEqual(new Set(Object.keys(shape)));
    }
  });

  it("give the defaults the schema fills in (a field with none is required)", () => {
    let compared = 0;
    for (const [section, { parsed: object }] of Object.entries(objects)) {
      for (const [field, documented] of tables.get(section) ?? []) {
        const actual = field
          .split(".")
          .reduce<unknown>(
            (value, part) => (value as Record<string, unknown> | undefined)?.[part],
            object,
          );
        const plain = documented.match(/^`?([\w[\]{}]+)`?(?: \(.*\))?$/)?.[1];
        if (documented === "") continue; // required: given by the fixture
        if (documented.startsWith("-")) {
          // Optional with no value: the schema fills nothing in.
          expect(actual, `${section} ${field}`).toBeUndefined();
          continue;
        }
        if (plain === undefined) continue;
        const value = actual ?? appliedLater[field];
        if (value === undefined) continue; // a default applied elsewhere (responses.ttl_seconds)
        expect(`${field} ${JSON.stringify(value)}`, section).toBe(
          `${field} ${/^[\d.]+$|^true$|^false$|^\[\]$|^\{\}$/.test(plain) ? plain : JSON.stringify(plain)}`,
        );
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(25);
  });

  it("required fields are the ones without a default", () => {
    for (const [section, { shape }] of Object.entries(objects)) {
      for (const [field, documented] of tables.get(section) ?? []) {
        const schema = shape[field.split(".")[0]] as {
          safeParse(v: unknown): { success: boolean };
        };
        if (documented === "")
          expect(schema.safeParse(undefined).success, `${section} ${field} is required`).toBe(
            false,
          );
        else
          expect(schema.safeParse(undefined).success, `${section} ${field} is optional`).toBe(true);
      }
    }
  });
});

describe("docs/test-kit.md's table of every error on demand", () => {
  it("its 500 internal_error recipe (startGateway's extraRoutes) starts a gateway that answers 500", async () => {
    const row = read("docs/test-kit.md")
      .split("\n")
      .find((line) => line.startsWith("| 500 `internal_error`"));
    const recipe = row?.match(/`startGateway\(\{ extraRoutes: (.*) \}\)`/)?.[1];
    expect(recipe, "the row gives startGateway({ extraRoutes: ... })").toBeDefined();
    const extraRoutes = new Function(`return (${recipe});`)();
    const key = "kn-hunt-docs-boom-key-000000000000";
    const gateway = await startGateway({
      config: {
        providers: [{ id: "mock", wire: "mock" }],
        accounts: [{ id: "a", keys: [{ id: "k", value: key }] }],
      },
      extraRoutes,
    });
    try {
      const res = await fetch(`${gateway.url}/v1/boom`, {
        headers: { authorization: `Bearer ${key}` },
      });
      expect(res.status).toBe(500);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("internal_error");
    } finally {
      await gateway.close();
    }
  });
});

describe("docs/cli.md: each mistake is one line on stderr", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "hunt-docs-"));
  });
  afterAll(() => {
    killRunningClis();
    rmSync(dir, { recursive: true, force: true });
  });

  // A machine without an OS keychain (headless Linux, CI: cli.md's own words), where the sealing
  // key would be a new file beside the database. vitest.config.ts forces the file store for the
  // whole suite; a user has no such variable set.
  const noKeychain = (): NodeJS.ProcessEnv => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: join(dir, "home"),
      XDG_CONFIG_HOME: join(dir, "config"),
      DBUS_SESSION_BUS_ADDRESS: "unix:path=/nonexistent/hunt-docs-bus",
      NO_COLOR: "1",
    };
    delete env.GATEWAY_SECRET_KEY_STORE;
    delete env.GATEWAY_SECRET_KEY;
    return env;
  };

  it("--db on a file that is not a database, without a keychain: one line, and no key file promised", async () => {
    const file = join(dir, "notes.txt");
    writeFileSync(file, "these are my notes, not a database\n".repeat(20));
    const done = await runCli(["serve", "--port", "0", "--db", file], noKeychain());
    expect(done.code).toBe(2);
    expect(done.stderr.split("\n").filter(Boolean)).toEqual([
      `gateway: --db ${file} is not a gateway database (not an SQLite file); give another file, or a new name to create one`,
    ]);
  });

  it("--db on a directory, without a keychain: one line", async () => {
    const data = join(dir, "data");
    mkdirSync(data);
    const done = await runCli(["serve", "--port", "0", "--db", data], noKeychain());
    expect(done.code).toBe(2);
    expect(done.stderr.split("\n").filter(Boolean)).toEqual([
      `gateway: --db ${data} is a directory; give a database file, such as --db ${join(data, "gateway.db")}`,
    ]);
  });
});
