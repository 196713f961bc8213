// A throwaway PostgreSQL server for tests and benchmarks: initdb into a fresh temporary directory,
// started on 127.0.0.1 (and a unix socket in the same directory), stopped by its own pid. Plain
// JavaScript so that scripts/ can start the same server without a TypeScript loader; the types
// are in postgres-server.d.mts.
import { execFileSync, spawn } from "node:child_process";
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

const cacheRoot = join(
  import.meta.dirname,
  "..",
  "..",
  "node_modules",
  ".cache",
  "gateway-postgres",
);
const serverEnv = { PATH: process.env.PATH ?? "", LC_ALL: "C", TZ: "UTC" };

const installHint =
  "PostgreSQL server binaries (initdb, postgres) not found: install them with `apt-get install postgresql` " +
  "(Debian puts them in /usr/lib/postgresql/<version>/bin), or set GATEWAY_PG_BIN to their directory.";

/** The directory holding initdb and postgres: GATEWAY_PG_BIN, Debian's newest version, or PATH. */
export function findPostgresBin() {
  const candidates = [];
  if (process.env.GATEWAY_PG_BIN) candidates.push(process.env.GATEWAY_PG_BIN);
  const debian = "/usr/lib/postgresql";
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((name) => /^\d+$/.test(name))
      .sort((a, b) => Number(b) - Number(a));
    for (const version of versions) candidates.push(join(debian, version, "bin"));
  }
  candidates.push(...(process.env.PATH ?? "").split(delimiter).filter(Boolean));
  const found = candidates.find(
    (dir) => existsSync(join(dir, "initdb")) && existsSync(join(dir, "postgres")),
  );
  if (!found) throw new Error(installHint);
  return found;
}

/**
 * PostgreSQL refuses to run as root: under root the server runs as the `postgres` user that
 * Debian's package creates. Returns the spawn identity, or an empty object when not root.
 */
function serverIdentity() {
  if (typeof process.getuid !== "function" || process.getuid() !== 0) return {};
  try {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    return { uid, gid };
  } catch {
    throw new Error(
      "running as root, and PostgreSQL refuses root: a `postgres` user is needed to run the test server (`apt-get install postgresql` creates it)",
    );
  }
}

/** Gives a fresh directory to the user the server runs as. */
function handOver(dir, identity) {
  if (identity.uid !== undefined) execFileSync("chown", [`${identity.uid}:${identity.gid}`, dir]);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

function run(file, args, options) {
  try {
    execFileSync(file, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const output = `${err.stdout ?? ""}${err.stderr ?? ""}`.trim();
    throw new Error(`${file} failed: ${output || err.message}`);
  }
}

// Runs the server in the background and waits on stdin: when the parent goes, however it goes,
// the pipe closes and the server is shut down with it instead of outliving the test run.
const supervisor = `"$@" &
pid=$!
echo "$pid"
cat >/dev/null
kill -INT "$pid" 2>/dev/null
wait "$pid"`;

/** Settings that make a test server fast and keep its log quiet; crash safety needs no fsync here. */
const serverSettings = [
  "fsync=off",
  "full_page_writes=off",
  "max_connections=300",
  "shared_buffers=64MB",
  "log_min_messages=warning",
  "log_min_error_statement=panic",
  "log_checkpoints=off",
];

async function startOnce(bin, dir, identity, port, settings) {
  const args = [join(bin, "postgres"), "-D", join(dir, "data"), "-k", dir, "-h", "127.0.0.1"];
  args.push("-p", String(port));
  for (const setting of [...serverSettings, ...settings]) args.push("-c", setting);
  const child = spawn("sh", ["-c", supervisor, "sh", ...args], {
    cwd: dir,
    env: serverEnv,
    stdio: ["pipe", "pipe", "pipe"],
    ...identity,
  });
  let log = "";
  let pid = 0;
  let settled = false;
  return await new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error("did not accept connections in time")), 20_000);
    const fail = (err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      // Closing the supervisor's stdin stops a server that started anyway.
      child.stdin.end();
      reject(new Error(`postgres on port ${port}: ${err.message}\n${log.trim()}`));
    };
    child.stdout.on("data", (chunk) => {
      pid ||= Number(chunk.toString().trim());
    });
    child.stderr.on("data", (chunk) => {
      // A rare failure (a deadlock, say) is explained only by the server's own log of it.
      if (process.env.GATEWAY_TEST_PG_LOG) appendFileSync(process.env.GATEWAY_TEST_PG_LOG, chunk);
      // Only the start-up lines matter; later ones are dropped so the pipe never fills.
      if (settled) return;
      log += chunk.toString();
      if (log.includes("ready to accept connections") && pid) {
        settled = true;
        clearTimeout(timer);
        resolve({ child, pid, port });
      }
    });
    child.once("exit", (code) => fail(new Error(`exited with ${code}`)));
  });
}

/**
 * A data directory fresh from initdb, made once per server version and kept under
 * node_modules/.cache: copying it is several times faster than running initdb for every server.
 */
function template(bin, identity) {
  const version = execFileSync(join(bin, "postgres"), ["--version"], { encoding: "utf8" });
  const path = join(cacheRoot, version.replace(/[^A-Za-z0-9.]+/g, "-").replace(/^-|-$/g, ""));
  if (existsSync(path)) return path;
  // initdb writes where the server's user can reach: a directory of its own under tmpdir.
  const work = mkdtempSync(join(tmpdir(), "gateway-pg-initdb-"));
  try {
    handOver(work, identity);
    const args = ["-D", join(work, "data"), "-U", "postgres", "--auth=trust", "--no-locale"];
    args.push("-E", "UTF8", "--no-sync", "--no-instructions");
    run(join(bin, "initdb"), args, { cwd: work, env: serverEnv, ...identity });
    mkdirSync(cacheRoot, { recursive: true });
    const staged = mkdtempSync(join(cacheRoot, "staged-"));
    run("cp", ["-a", join(work, "data"), join(staged, "data")], {});
    try {
      renameSync(join(staged, "data"), path);
    } catch (err) {
      // Another run made the same template meanwhile; theirs is as good.
      if (!existsSync(path)) throw err;
    }
    rmSync(staged, { recursive: true, force: true });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return path;
}

/**
 * Starts a server in a new temporary directory and resolves once it accepts connections.
 * `settings` are more `name=value` server settings (the bench loads pg_stat_statements).
 * `stop()` shuts it down by its pid, waits for it, and removes the directory.
 */
export async function startPostgresServer(settings = []) {
  const bin = findPostgresBin();
  const identity = serverIdentity();
  const source = template(bin, identity);
  const dir = mkdtempSync(join(tmpdir(), "gateway-pg-"));
  try {
    handOver(dir, identity);
    run("cp", ["-a", source, join(dir, "data")], {});
    let started;
    let lastError;
    // A port found free can be taken by another process before the server binds it.
    for (let attempt = 0; attempt < 3 && !started; attempt++) {
      try {
        started = await startOnce(bin, dir, identity, await freePort(), settings);
      } catch (err) {
        lastError = err;
      }
    }
    if (!started) throw lastError;
    const { child, pid, port } = started;
    const exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once("exit", () => resolve());
    });
    return {
      host: "127.0.0.1",
      port,
      socketDir: dir,
      pid,
      url: (database = "postgres") => `postgres://postgres@127.0.0.1:${port}/${database}`,
      async stop() {
        try {
          process.kill(pid, "SIGINT");
        } catch {
          // Already gone.
        }
        child.stdin.end();
        await exited;
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
