import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ProcessLedger } from "../../src/server/billing/ledger.js";
import type { Services } from "../../src/server/compose/services.js";
import type { ConfigInput } from "../../src/server/config/schema.js";
import {
  type GatewayOptions,
  type RunningGateway,
  startGateway,
} from "../../src/server/gateway.js";
import { secretKeyEnv } from "../../src/store/secret-box.js";
import type { Store } from "../../src/store/sqlite/store.js";
import { createTestDatabase } from "./postgres.js";

export const KEY = "kn-test-standard-key-000000000000";
export const KEY2 = "kn-test-second-key-0000000000000";
export const SHARED_KEY = "kn-test-shared-key-0000000000000";
export const LOGIN_KEY = "kn-test-login-key-00000000000000";
export const ADMIN_KEY = "kn-test-admin-key-00000000000000";
export const POOR_KEY = "kn-test-poor-account-key-0000000";

/** A config most tests start from: mock models, one funded account, one empty account. */
export function baseConfig(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return {
    providers: [
      { id: "mock", wire: "mock" },
      { id: "mock-down", wire: "mock", mock: { fail_status: 503 } },
    ],
    models: [
      {
        name: "mock-gpt",
        provider: "mock",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      },
      { name: "mock-gpt:free", provider: "mock", upstream_model: "mock-gpt" },
      { name: "mock-pro", provider: "mock", subscribers_only: true, price_input_per_mtok: 10_000 },
      { name: "mock-down", provider: "mock-down", price_input_per_mtok: 10_000 },
      { name: "mock-image", provider: "mock", modality: "image", price_per_unit: 500 },
    ],
    routes: [{ name: "auto", steps: ["mock-down", "mock-gpt"] }],
    accounts: [
      {
        id: "acct",
        balance_idr: 1_000_000,
        rpm_limit: 1000,
        keys: [
          { id: "k1", label: "main", kind: "standard", value: KEY },
          { id: "k2", label: "second", kind: "standard", value: KEY2 },
          { id: "ks", label: "shared", kind: "shared", value: SHARED_KEY },
          { id: "kl", label: "login", kind: "login", value: LOGIN_KEY },
        ],
      },
      { id: "poor", balance_idr: 0, keys: [{ id: "kp", value: POOR_KEY }] },
    ],
    admin_keys: [ADMIN_KEY],
    ...overrides,
  };
}

/** The lists of a config whose rows a test adds to `baseConfig`'s. */
type ConfigList = "providers" | "models" | "routes" | "accounts";
type Rows<T> = T[] | ((base: T[]) => T[]);

/**
 * A test's config on top of `baseConfig`: each list's rows, or a function from the base's rows to
 * the list (to change or drop the base's); any other field in place of the base's.
 */
export type ConfigAdditions = Omit<Partial<ConfigInput>, ConfigList> & {
  [K in ConfigList]?: Rows<NonNullable<ConfigInput[K]>[number]>;
};

function rowsAfter<T>(base: T[] | undefined, own: Rows<T> | undefined): T[] {
  const rows = base ?? [];
  return typeof own === "function" ? own(rows) : [...rows, ...(own ?? [])];
}

/** `baseConfig` with a test's own providers, models, routes and accounts after the base's. */
export function baseConfigWith(more: ConfigAdditions = {}): ConfigInput {
  const base = baseConfig();
  return {
    ...base,
    ...more,
    providers: rowsAfter(base.providers, more.providers),
    models: rowsAfter(base.models, more.models),
    routes: rowsAfter(base.routes, more.routes),
    accounts: rowsAfter(base.accounts, more.accounts),
  };
}

/** A gateway's services on SQLite, whose store and ledger answer at once. */
export type SqliteServices = Omit<Services, "store" | "ledger"> & {
  store: Store;
  ledger: ProcessLedger;
};

export interface TestGateway extends RunningGateway {
  services: SqliteServices;
  dir: string;
  dbPath: string;
}

const dayMs = 86_400_000;

/**
 * Where a test's manual clock starts unless it says (`now`): the last noon (UTC) the wall clock
 * has passed. Noon starts a minute and an hour and is twelve hours from either end of its day, so
 * what a test advances stays in the windows it began in (per-minute limits, the free day, budget
 * windows); started at the wall clock's time, a test begun in a minute's or a day's last seconds
 * crossed into the next one. Passed, not ahead: a later start with the real clock on the same
 * database reads time on from the wall clock, not from a time the test recorded ahead of it.
 */
export function manualClockStart(wall: number = Date.now()): number {
  return wall - ((((wall - dayMs / 2) % dayMs) + dayMs) % dayMs);
}

/**
 * `now` for a gateway on the real clock whose test needs its time to pass (a job's run) and counts
 * in the clock's day: the wall clock's pace from `manualClockStart()` on, so the test stays in the
 * day it began in.
 */
export function wallPaceFromNoon(): () => number {
  const wall = Date.now();
  const start = manualClockStart(wall);
  return () => start + (Date.now() - wall);
}

/**
 * A gateway on 127.0.0.1 with a real SQLite file in a fresh temp directory; a manual clock starts
 * at `manualClockStart()` unless `now` says where.
 */
export async function testGateway(options: GatewayOptions = {}): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), "gateway-test-"));
  const dbPath = options.db ?? join(dir, "gateway.db");
  const gw = await startGateway({
    config: baseConfig(),
    ...(options.clock === "manual" && { now: () => manualClockStart() }),
    // Keepalives start from admission: a stream that fails within this interval still gets an
    // HTTP status, so it stays well above a loaded machine's upstream round trips. Tests of
    // keepalives themselves pass a short one.
    keepaliveMs: 1_000,
    ...options,
    db: dbPath,
    port: 0,
  });
  const close = gw.close.bind(gw);
  return {
    ...gw,
    services: gw.services as SqliteServices,
    dir,
    dbPath,
    close: async () => {
      await close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function post(
  gw: { url: string },
  path: string,
  body: unknown,
  headers: Record<string, string> = { authorization: `Bearer ${KEY}` },
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

/** A request over a raw connection, whose answer the test reads (and stops reading) itself. */
export function rawRequest(url: string, path: string, body: object): Socket {
  const text = JSON.stringify(body);
  const socket = connect({ host: "127.0.0.1", port: Number(new URL(url).port) });
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer ${KEY}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
  );
  return socket;
}

/**
 * Reads `socket` (a raw request's, its reading paused) until the gateway closes it: "closed by
 * the gateway", or, past `boundMs`, that it is still open. The socket is destroyed either way.
 */
export async function readUntilClosed(socket: Socket, boundMs: number): Promise<string> {
  const closed = new Promise<string>((resolve) => {
    socket.once("close", () => resolve("closed by the gateway"));
  });
  socket.resume();
  let bound: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    closed,
    new Promise<string>((resolve) => {
      bound = setTimeout(() => resolve(`still open ${boundMs / 1000} s after it read`), boundMs);
    }),
  ]);
  clearTimeout(bound);
  socket.destroy();
  return outcome;
}

export const chat = (content = "hello", model = "mock-gpt", extra: object = {}) => ({
  model,
  messages: [{ role: "user", content }],
  ...extra,
});

/** The backends a suite that both must pass runs on (`describe.each(backends)`). */
export const backends = ["sqlite", "postgres"] as const;
export type BackendName = (typeof backends)[number];

/**
 * `testGateway` on the named backend: SQLite in its temp directory, or a fresh database on the
 * test run's Postgres server (with a secret key for BYOK sealing, as every gateway on a shared
 * database is given).
 */
export async function gatewayOn(
  backend: BackendName,
  options: GatewayOptions = {},
): Promise<TestGateway> {
  if (backend === "sqlite") return testGateway(options);
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  return testGateway({ ...options, db: await createTestDatabase() });
}
