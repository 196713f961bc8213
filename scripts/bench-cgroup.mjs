// CPU quotas for the bench's `gateway serve` processes, as a container gets them: each process in a
// cgroup of its own whose CFS quota caps it at `cpus` of a core. Two gateways held to the same
// quota as one show what a second gateway adds where each has its own share of a machine, which
// two unconstrained processes on a 2-core VM shared with the load generator, the upstream and
// Postgres cannot. cgroup v1 (`/sys/fs/cgroup/cpu`) or v2 (`cpu.max`); needs root.
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const v1Root = "/sys/fs/cgroup/cpu";
const v2Root = "/sys/fs/cgroup";
// A short period keeps a throttled gateway's pauses short (10 ms at most, not 100).
const periodUs = 20_000;
// A quota is a ceiling, not a guarantee: on a machine shared with other work the quota'd
// processes also get ten times the default weight, so each one gets its whole quota.
const shares = 10_240;

function layout() {
  if (existsSync(join(v1Root, "cpu.cfs_quota_us"))) return "v1";
  if (existsSync(join(v2Root, "cgroup.controllers"))) {
    const controllers = readFileSync(join(v2Root, "cgroup.controllers"), "utf8");
    if (controllers.split(/\s+/).includes("cpu")) return "v2";
  }
  return undefined;
}

/** Why quotas cannot be set here, or undefined when they can. */
export function cgroupMissing() {
  const kind = layout();
  if (!kind) return "no cgroup cpu controller at /sys/fs/cgroup";
  const root = kind === "v1" ? v1Root : v2Root;
  const probe = join(root, `gateway-bench-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return undefined;
  } catch (err) {
    return `cannot create a cgroup under ${root} (${err.code}): run as root`;
  }
}

const made = new Set();

/**
 * Puts `pid` (every thread of it) in a new cgroup capped at `cpus` cores. Returns the cgroup's
 * path; `releaseCgroups()` moves what is left in them back and removes them.
 */
export function capCpu(pid, cpus, name) {
  const kind = layout();
  const root = kind === "v1" ? v1Root : v2Root;
  const dir = join(root, `gateway-bench-${process.pid}-${name}`);
  mkdirSync(dir);
  made.add(dir);
  const quota = Math.round(cpus * periodUs);
  if (kind === "v1") {
    writeFileSync(join(dir, "cpu.cfs_period_us"), String(periodUs));
    writeFileSync(join(dir, "cpu.cfs_quota_us"), String(quota));
    writeFileSync(join(dir, "cpu.shares"), String(shares));
  } else {
    writeFileSync(join(dir, "cpu.max"), `${quota} ${periodUs}`);
    writeFileSync(join(dir, "cpu.weight"), String(Math.round(shares / 10.24)));
  }
  writeFileSync(join(dir, "cgroup.procs"), String(pid));
  return dir;
}

let favoured;

/**
 * Gives `pid` ten times the default CPU weight, with no cap: the load generator, the upstream and
 * Postgres beside quota'd gateways, so that on a machine shared with other work the gateways'
 * quota, not their neighbours' share of the machine, is what runs out.
 */
export function favourCpu(pid) {
  const kind = layout();
  if (!favoured) {
    favoured = join(kind === "v1" ? v1Root : v2Root, `gateway-bench-${process.pid}-favoured`);
    mkdirSync(favoured);
    made.add(favoured);
    if (kind === "v1") writeFileSync(join(favoured, "cpu.shares"), String(shares));
    else writeFileSync(join(favoured, "cpu.weight"), String(Math.round(shares / 10.24)));
  }
  try {
    writeFileSync(join(favoured, "cgroup.procs"), String(pid));
  } catch {
    // Ended meanwhile (a Postgres backend).
  }
}

/** Moves any process still in the bench's cgroups back to the root and removes the cgroups. */
export function releaseCgroups() {
  for (const dir of made) {
    const root = dir.slice(0, dir.lastIndexOf("/"));
    try {
      const left = readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean);
      for (const pid of left) {
        try {
          writeFileSync(join(root, "cgroup.procs"), pid);
        } catch {
          // Ended meanwhile.
        }
      }
      rmdirSync(dir);
      made.delete(dir);
      if (dir === favoured) favoured = undefined;
    } catch {
      // Left for the next call (a process still exiting).
    }
  }
}

// A bench stopped by Ctrl-C or a crash leaves no cgroup behind.
process.once("exit", releaseCgroups);
