import { existsSync, readFileSync, realpathSync } from "node:fs";
import { basename, delimiter, dirname, isAbsolute, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * How a user runs this package's CLI from here, so every command the product prints works as
 * written: `gateway` when it is on the PATH (a global install), `npx gateway` where npx finds it
 * (a project that depends on the package, or a clone of it after `npm ci`), else `node <bin>`.
 * Decided once per process, from where this package is, the PATH and the working directory.
 */

/** dist/ or src/, one folder below the package root. */
const packageRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = join(packageRoot, "bin", "gateway");

const real = (path: string): string | undefined => {
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
};

export function detectCliPrefix(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): string {
  const target = real(bin);
  if (target === undefined) return "npx gateway";
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    // npx and `npm run` put node_modules/.bin folders on the PATH of the command they run, not
    // on the user's shell's: a `gateway` found there is not one the user can type.
    if (dir === "" || isPackageBin(dir)) continue;
    if (real(join(dir, "gateway")) === target) return "gateway";
  }
  if (npxFinds(target, cwd)) return "npx gateway";
  const path = relative(cwd, bin);
  const shown = path.startsWith("..") || isAbsolute(path) ? bin : path;
  return `node ${/^[\w./@%+=,-]+$/.test(shown) ? shown : `'${shown.replace(/'/g, "'\\''")}'`}`;
}

function isPackageBin(dir: string): boolean {
  return basename(dir) === ".bin" && basename(dirname(dir)) === "node_modules";
}

/**
 * npx looks in the project it runs in: the nearest folder up from `cwd` with a package.json or a
 * node_modules. There it runs `node_modules/.bin/gateway`, or the project's own bin.
 */
function npxFinds(target: string, cwd: string): boolean {
  for (let dir = cwd; ; dir = dirname(dir)) {
    const hasModules = existsSync(join(dir, "node_modules"));
    const manifest = join(dir, "package.json");
    if (hasModules || existsSync(manifest)) {
      if (real(join(dir, "node_modules", ".bin", "gateway")) === target) return true;
      return real(dir) === real(packageRoot) && ownBin(manifest);
    }
    if (dirname(dir) === dir) return false;
  }
}

function ownBin(manifest: string): boolean {
  try {
    const bins = (JSON.parse(readFileSync(manifest, "utf8")) as { bin?: unknown }).bin;
    return typeof bins === "object" && bins !== null && "gateway" in bins;
  } catch {
    return false;
  }
}

let prefix: string | undefined;

/** `gateway <words>` as the user runs it here (`npx gateway keys create ...`, say). */
export function cliCommand(words: string): string {
  prefix ??= detectCliPrefix();
  return `${prefix} ${words}`;
}
