import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach } from "vitest";
import { createOwnerLink } from "../../src/server/auth/owner-session.js";
import type { RunningGateway } from "../../src/server/gateway.js";

/**
 * Runs the real `bin/gateway` (built `dist/`) as a subprocess with a private HOME and config
 * directory, plus helpers that play the owner in the dashboard over HTTP.
 */

const bin = join(import.meta.dirname, "..", "..", "bin", "gateway");

export interface CliHome {
  dir: string;
  env: NodeJS.ProcessEnv;
  credentialsPath: string;
  remove(): void;
}

/** A temp HOME + XDG_CONFIG_HOME with the file credential store forced and no inherited keys. */
export function cliHome(extraEnv: NodeJS.ProcessEnv = {}): CliHome {
  const dir = mkdtempSync(join(tmpdir(), "gateway-cli-"));
  const home = join(dir, "home");
  const config = join(dir, "config");
  mkdirSync(home);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    XDG_CONFIG_HOME: config,
    GATEWAY_CREDENTIAL_STORE: "file",
    NO_COLOR: "1",
    ...extraEnv,
  };
  for (const name of ["GATEWAY_API_KEY", "GATEWAY_BASE_URL"])
    if (!(name in extraEnv)) delete env[name];
  return {
    dir,
    env,
    credentialsPath: join(config, "model-gateway", "credentials.json"),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** What a file's CLI tests make, each gone after its test. */
export interface CliScratch {
  /** A CLI home of its own (`cliHome`). */
  newHome(env?: NodeJS.ProcessEnv): CliHome;
  /** A directory with no gateway.db, so `gateway login` finds no local serve to sign in with. */
  emptyDir(): string;
  /** `server` listening on 127.0.0.1 (a stand-in for a gateway); its URL. */
  listen(server: Server): Promise<string>;
}

/**
 * For a file of CLI tests: after each test, every CLI it ran is killed and every home, directory
 * and server it made through the returned `CliScratch` is removed or closed.
 */
export function useCliScratch(): CliScratch {
  const homes: CliHome[] = [];
  const dirs: string[] = [];
  const servers: Server[] = [];
  afterEach(async () => {
    killRunningClis();
    for (const home of homes.splice(0)) home.remove();
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
    await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
  });
  return {
    newHome(env = {}) {
      const home = cliHome(env);
      homes.push(home);
      return home;
    },
    emptyDir() {
      const dir = mkdtempSync(join(tmpdir(), "gateway-cli-cwd-"));
      dirs.push(dir);
      return dir;
    },
    async listen(server) {
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
  };
}

/** What `gateway login` keeps per profile (`src/cli/credentials/types.ts`). */
export interface SavedLogin {
  key: string;
  baseUrl: string;
  keyId: string;
  accountId: string;
}

/** A login as `gateway login` leaves it in the home's credentials file, without the browser dance. */
export function saveLogin(home: CliHome, login: SavedLogin, profile = "default"): void {
  mkdirSync(dirname(home.credentialsPath), { recursive: true, mode: 0o700 });
  const file = existsSync(home.credentialsPath)
    ? (JSON.parse(readFileSync(home.credentialsPath, "utf8")) as {
        profiles: Record<string, unknown>;
      })
    : { profiles: {} };
  file.profiles[profile] = { ...login, savedAt: new Date().toISOString() };
  writeFileSync(home.credentialsPath, JSON.stringify({ version: 1, profiles: file.profiles }), {
    mode: 0o600,
  });
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export interface CliProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first match of `pattern` in stdout + stderr. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  exit(timeoutMs?: number): Promise<CliResult>;
}

const running = new Set<ChildProcess>();

/** `cwd`: where it runs (the test's own directory when absent). */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv, cwd?: string): CliProcess {
  return spawnNode([bin, ...args], env, cwd);
}

/** `node` with these arguments (a script, `-e`, node flags), watched as `spawnCli` watches the CLI. */
export function spawnNode(argv: string[], env: NodeJS.ProcessEnv, cwd?: string): CliProcess {
  const started = performance.now();
  const child = spawn(process.execPath, argv, { env, cwd, stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let out = "";
  let err = "";
  const listeners = new Set<() => void>();
  const notify = () => {
    for (const l of listeners) l();
  };
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
    notify();
  });
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
    notify();
  });
  const exited = new Promise<CliResult>((resolve) => {
    child.once("close", (code) => {
      running.delete(child);
      resolve({ code, stdout: out, stderr: err, ms: Math.round(performance.now() - started) });
    });
  });
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    waitFor(pattern, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const match = (out + err).match(pattern);
          if (!match) return false;
          done();
          resolve(match);
          return true;
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(
              `CLI output did not match ${pattern} within ${timeoutMs} ms:\n${out}\n${err}`,
            ),
          );
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        if (check()) return;
        listeners.add(check);
        void exited.then(() => {
          if (listeners.has(check) && !check()) {
            done();
            reject(new Error(`CLI exited before printing ${pattern}:\n${out}\n${err}`));
          }
        });
      });
    },
    exit(timeoutMs = 15_000) {
      return Promise.race([
        exited,
        new Promise<never>((_, reject) =>
          setTimeout(
            () => reject(new Error(`CLI did not exit within ${timeoutMs} ms:\n${out}\n${err}`)),
            timeoutMs,
          ).unref(),
        ),
      ]);
    },
  };
}

export function runCli(
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 15_000,
  cwd?: string,
): Promise<CliResult> {
  return spawnCli(args, env, cwd).exit(timeoutMs);
}

/** For afterEach: no CLI outlives its test. */
export function killRunningClis(): void {
  for (const child of running) child.kill("SIGKILL");
  running.clear();
}

/** The user code and URL `gateway login` prints. */
export async function loginPrompt(cli: CliProcess): Promise<{ url: string; userCode: string }> {
  const [, url] = await cli.waitFor(/(http:\/\/\S+\/dashboard\/device\?user_code=\S+)/);
  const [, userCode] = await cli.waitFor(/shows this code: ([A-Z]{4}-[A-Z]{4})/);
  return { url, userCode };
}

// ---- the owner's side, over HTTP ---------------------------------------------------------

export interface OwnerBrowser {
  cookie: string;
  /** The raw Set-Cookie header, to check its attributes. */
  setCookie: string;
}

/** Opens a fresh one-time owner URL the way a browser would and keeps the session cookie. */
export async function ownerSession(gw: RunningGateway, accountId = "acct"): Promise<OwnerBrowser> {
  const link = await createOwnerLink(gw.services.repos.sessions, accountId, gw.url);
  const res = await fetch(link, { redirect: "manual" });
  const setCookie = res.headers.get("set-cookie") ?? "";
  if (res.status !== 303 || !setCookie) throw new Error(`owner link answered ${res.status}`);
  return { cookie: setCookie.split(";")[0], setCookie };
}

/** The CSRF token of an owner's dashboard session, as its pages carry it. */
export async function dashboardCsrf(
  gw: { url: string },
  owner: { cookie: string },
): Promise<string> {
  const html = await (
    await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })
  ).text();
  return /name="csrf-token" content="([^"]+)"/.exec(html)![1];
}

export async function approvalPage(
  gw: { url: string },
  owner: OwnerBrowser | undefined,
  userCode: string,
): Promise<{ status: number; html: string; csrf?: string; headers: Headers }> {
  const res = await fetch(`${gw.url}/dashboard/device?user_code=${encodeURIComponent(userCode)}`, {
    headers: owner ? { cookie: owner.cookie } : {},
  });
  const html = await res.text();
  const csrf = /name="csrf_token" value="([^"]+)"/.exec(html)?.[1];
  return { status: res.status, html, csrf, headers: res.headers };
}

export async function decide(
  gw: { url: string },
  decision: "approve" | "deny",
  form: Record<string, string>,
  headers: Record<string, string>,
): Promise<{ status: number; html: string }> {
  const res = await fetch(`${gw.url}/dashboard/device/${decision}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(form).toString(),
    redirect: "manual",
  });
  return { status: res.status, html: await res.text() };
}

/** The whole owner side: session, approval page, CSRF token, then Approve (or Deny). */
export async function ownerDecides(
  gw: RunningGateway,
  userCode: string,
  decision: "approve" | "deny",
): Promise<{ status: number; html: string }> {
  const owner = await ownerSession(gw);
  const page = await approvalPage(gw, owner, userCode);
  if (page.status !== 200 || !page.csrf) throw new Error(`approval page answered ${page.status}`);
  return decide(
    gw,
    decision,
    { user_code: userCode, csrf_token: page.csrf },
    { cookie: owner.cookie, origin: gw.url },
  );
}
