// The floor for a streamed event on this machine: how much of the gateway's CPU per event any Node
// relay pays (the kernel's read and write, Node's and undici's stream machinery) and how much is
// the gateway's own. Four relays of the same paced streams, each alone in a child process, measured
// in alternating rounds of one run with the process's own `process.cpuUsage()`, user and system
// apart, and the part of it spent off the main thread (from /proc):
//
//   net      a raw `node:net` byte relay: each client connection piped to one upstream connection
//   http     a raw `node:http` server: undici.request to the upstream, res.write per body chunk
//   raw      `http`'s server, with a minimal HTTP/1.1 reader on `node:net` toward the upstream
//            in undici's place (keep-alive connections, chunked bodies): what undici costs
//   hono     the bare Hono pass-through of the bench (scripts/bench-bare-proxy.mjs)
//   gateway  the gateway's full path (dist/, so `npm run build` first)
//
//   node scripts/bench-event-floor.mjs [rounds] [streams a connection] [connections] [pace ms]
//   node scripts/bench-event-floor.mjs 3 10 20 1        (the defaults: gw-p1-20's shape)
//   BENCH_RELAYS=http,gateway node scripts/bench-event-floor.mjs
//   BENCH_RELAY_NODE_ARGS="--max-semi-space-size=16"   Node flags of the relays' processes
//   BENCH_RELAYS=gateway,gateway:--use-largepages=on   one relay twice, the second with Node flags
//   BENCH_RELAYS=direct,net,hono,gateway BENCH_WARM_STREAMS=3000 node scripts/bench-event-floor.mjs 5 40 1 1
//                               the first data event at one connection, and what each relay adds
//                               to it (`direct`: the upstream itself, no relay)
//   BENCH_PROFILE_DIR=prof      a CPU profile of each relay's measured streams, one a round
//   BENCH_CALLGRIND=1 node scripts/bench-event-floor.mjs 1 10 1 5   each relay under callgrind:
//                               its main thread's instructions an event (minutes; pace it slowly)
//
// The fake upstream and the SSE client are child processes of their own. Every relay is divided
// by the same count, the upstream's chunks (`pacedEvents` a stream), whatever it does with them.
import { execFileSync, fork, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { connect, createServer as createNetServer } from "node:net";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { benchBody, benchConfig, benchHeaders } from "./bench-config.mjs";
import { pacedEvents } from "./bench-upstream.mjs";

const script = fileURLToPath(import.meta.url);
const here = fileURLToPath(new URL(".", import.meta.url));
const role = process.argv[2];

/** A relay in this process: reports its URL, then its CPU whenever asked. */
async function serveRelay(kind, upstreamUrl) {
  const started = await relays[kind](upstreamUrl);
  const callgrind = process.env.BENCH_CALLGRIND === "1";
  const profiler = process.env.BENCH_PROFILE_DIR ? await measuredProfile(kind) : undefined;
  process.on("message", async (m) => {
    // Under callgrind, the measured streams' instructions alone: zeroed before, dumped after.
    if (callgrind)
      execFileSync("callgrind_control", [m === "cpu" ? "-z" : "-d", String(process.pid)]);
    if (profiler) await (m === "cpu" ? profiler.start() : profiler.stop());
    process.send({ cpu: process.cpuUsage(), otherThreadsUs: otherThreadsCpuUs() });
  });
  process.on("disconnect", async () => {
    await started.close?.();
    process.exit(0);
  });
  process.send({ url: started.url });
}

/**
 * CPU µs of this process's threads but the main one (workers, libuv's pool, V8's helpers), which
 * `process.cpuUsage()` counts too; /proc counts in USER_HZ ticks (100 a second on Linux).
 */
function otherThreadsCpuUs() {
  let ticks = 0;
  try {
    for (const tid of readdirSync("/proc/self/task")) {
      if (Number(tid) === process.pid) continue;
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    }
  } catch {
    return Number.NaN;
  }
  return ticks * 10_000;
}

/** A CPU profile of the measured streams alone, one file a round in BENCH_PROFILE_DIR. */
async function measuredProfile(kind) {
  const { Session } = await import("node:inspector");
  const session = new Session();
  session.connect();
  const post = (method, params) =>
    new Promise((resolve, reject) =>
      session.post(method, params, (err, result) => (err ? reject(err) : resolve(result))),
    );
  await post("Profiler.enable");
  await post("Profiler.setSamplingInterval", { interval: 200 });
  // Made here, not at the end of a run minutes long that could not write its profile.
  mkdirSync(process.env.BENCH_PROFILE_DIR, { recursive: true });
  let round = 0;
  return {
    start: () => post("Profiler.start"),
    async stop() {
      const { profile } = await post("Profiler.stop");
      const file = join(process.env.BENCH_PROFILE_DIR, `${kind}.${++round}.cpuprofile`);
      writeFileSync(file, JSON.stringify(profile));
    },
  };
}

const relays = {
  async net(upstreamUrl) {
    const { hostname, port } = new URL(upstreamUrl);
    const server = createNetServer({ noDelay: true }, (client) => {
      const upstream = connect({ host: hostname, port: Number(port), noDelay: true });
      // Bytes both ways as they come, with backpressure, nothing parsed.
      client.pipe(upstream);
      upstream.pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
    });
    return listening(server);
  },

  async http(upstreamUrl) {
    const { Agent } = await import("undici");
    const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
    const origin = new URL(upstreamUrl).origin;
    const server = createHttpServer((req, res) => {
      const parts = [];
      req.on("data", (part) => parts.push(part));
      req.on("end", async () => {
        try {
          const upstream = await agent.request({
            origin,
            path: req.url,
            method: "POST",
            headers: { "content-type": "application/json" },
            body: Buffer.concat(parts),
          });
          res.writeHead(upstream.statusCode, {
            "content-type": upstream.headers["content-type"] ?? "application/octet-stream",
          });
          // Each chunk written as it is read; the upstream waits while the client does.
          upstream.body.on("data", (chunk) => {
            if (!res.write(chunk)) {
              upstream.body.pause();
              res.once("drain", () => upstream.body.resume());
            }
          });
          upstream.body.on("end", () => res.end());
          upstream.body.on("error", () => res.destroy());
        } catch {
          res.destroy();
        }
      });
    });
    server.keepAliveTimeout = 60_000;
    const started = await listening(server);
    return {
      ...started,
      close: async () => {
        await started.close();
        await agent.close();
      },
    };
  },

  async raw(upstreamUrl) {
    const { hostname, port } = new URL(upstreamUrl);
    const idle = [];
    const server = createHttpServer((req, res) => {
      const parts = [];
      req.on("data", (part) => parts.push(part));
      req.on("end", () => {
        const body = Buffer.concat(parts);
        const socket = idle.pop() ?? connect({ host: hostname, port: Number(port), noDelay: true });
        socket.write(
          `POST ${req.url} HTTP/1.1\r\nhost: ${hostname}:${port}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`,
        );
        socket.write(body);
        const answer = new RawAnswer(res, () => {
          socket.removeListener("data", onData);
          idle.push(socket);
        });
        const onData = (chunk) => {
          if (!answer.read(chunk)) {
            socket.pause();
            res.once("drain", () => socket.resume());
          }
        };
        socket.on("data", onData);
        socket.once("error", () => res.destroy());
      });
    });
    server.keepAliveTimeout = 60_000;
    const started = await listening(server);
    return {
      ...started,
      close: async () => {
        for (const socket of idle) socket.destroy();
        await started.close();
      },
    };
  },

  async hono(upstreamUrl) {
    const { startBareProxy } = await import("./bench-bare-proxy.mjs");
    return startBareProxy(upstreamUrl);
  },

  async gateway(upstreamUrl) {
    const { startGateway } = await import("../dist/index.js");
    const dir = mkdtempSync(join(tmpdir(), "gateway-event-floor-"));
    // As the bench runs it: /metrics on for admins, as `gateway serve` has it by default.
    const gw = await startGateway({
      port: 0,
      metrics: "admin",
      db: join(dir, "bench.db"),
      config: benchConfig(upstreamUrl),
    });
    return {
      url: gw.url,
      close: async () => {
        await gw.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

/**
 * One answer read from a keep-alive connection: the status line and headers, then a chunked body
 * (the bench upstream's streams), each chunk's data written to the client as it is decoded.
 */
class RawAnswer {
  head = "";
  started = false;
  /** Bytes left of the chunk being read; -1 while reading a chunk's size line. */
  left = -1;
  sizeLine = "";
  /** A chunk's data is followed by CRLF, skipped before the next size line. */
  skip = 0;

  constructor(res, done) {
    this.res = res;
    this.done = done;
  }

  /** false: the client's socket is full. */
  read(chunk) {
    let at = 0;
    if (!this.started) {
      this.head += chunk.toString("latin1");
      const end = this.head.indexOf("\r\n\r\n");
      if (end === -1) return true;
      const status = Number(this.head.slice(9, 12));
      this.res.writeHead(status, { "content-type": "text/event-stream" });
      at = chunk.length - (this.head.length - end - 4);
      this.started = true;
    }
    let writable = true;
    while (at < chunk.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - at);
        this.skip -= n;
        at += n;
      } else if (this.left === -1) {
        const lf = chunk.indexOf(10, at);
        if (lf === -1) {
          this.sizeLine += chunk.toString("latin1", at);
          return writable;
        }
        this.sizeLine += chunk.toString("latin1", at, lf);
        at = lf + 1;
        this.left = Number.parseInt(this.sizeLine, 16);
        this.sizeLine = "";
        if (this.left === 0) {
          this.res.end();
          this.done();
          return writable;
        }
      } else {
        const n = Math.min(this.left, chunk.length - at);
        writable = this.res.write(chunk.subarray(at, at + n)) && writable;
        this.left -= n;
        at += n;
        if (this.left === 0) {
          this.left = -1;
          this.skip = 2;
        }
      }
    }
    return writable;
  }
}

function listening(server) {
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${server.address().port}`,
        close: () => new Promise((r) => server.close(r)),
      }),
    );
  });
}

/** The SSE client: `connections` connections, each reading `streams` streams one after another. */
async function serveClient() {
  const { Pool } = await import("undici");
  process.on("message", async ({ url, connections, streams, body, gapMs }) => {
    const pool = new Pool(url, { connections, keepAliveTimeout: 60_000 });
    let events = 0;
    let failed = 0;
    const firsts = [];
    const one = async () => {
      const start = performance.now();
      const res = await pool.request({
        path: "/v1/chat/completions",
        method: "POST",
        headers: benchHeaders,
        body,
      });
      if (res.statusCode !== 200) failed++;
      let first = true;
      for await (const part of res.body) {
        if (first) {
          firsts.push(performance.now() - start);
          first = false;
        }
        events += part.toString().split("\n\n").length - 1;
      }
    };
    await Promise.all(
      Array.from({ length: connections }, async () => {
        for (let i = 0; i < streams; i++) {
          await one();
          if (gapMs) await new Promise((resolve) => setTimeout(resolve, gapMs));
        }
      }),
    );
    await pool.close();
    process.send({ events, failed, firsts });
  });
  process.on("disconnect", () => process.exit(0));
}

function child(args, execArgv = [], callgrindOut) {
  const stdio = ["ignore", "inherit", "inherit", "ipc"];
  const proc = callgrindOut
    ? spawn(
        "valgrind",
        [
          "--tool=callgrind",
          "--separate-threads=yes",
          `--callgrind-out-file=${callgrindOut}.%p`,
          process.execPath,
          ...execArgv,
          script,
          ...args,
        ],
        { stdio, env: { ...process.env, BENCH_CALLGRIND: "1" } },
      )
    : fork(script, args, { execArgv, stdio });
  const next = () => new Promise((resolve) => proc.once("message", resolve));
  return { proc, next };
}

async function main() {
  const rounds = Number(process.argv[2] ?? 3);
  const streams = Number(process.argv[3] ?? 10);
  const connections = Number(process.argv[4] ?? 20);
  const pace = Number(process.argv[5] ?? 1);
  const kinds = (process.env.BENCH_RELAYS ?? "net,http,hono,gateway").split(",");
  const relayNodeArgs = process.env.BENCH_RELAY_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const callgrindDir =
    process.env.BENCH_CALLGRIND === "1"
      ? mkdtempSync(join(process.env.BENCH_CALLGRIND_DIR ?? tmpdir(), "event-floor-cg-"))
      : undefined;

  const upstream = fork(join(here, "bench-upstream.mjs"), ["--child"], { execArgv: [] });
  const { url: upstreamUrl } = await new Promise((resolve) => upstream.once("message", resolve));
  const client = child(["--client"]);
  const running = new Map();
  for (const kind of kinds) {
    if (kind === "direct") {
      running.set(kind, { url: upstreamUrl });
      continue;
    }
    const relay = child(
      ["--relay", kind.split(":")[0], upstreamUrl],
      [...relayNodeArgs, ...(kind.split(":")[1]?.split(",") ?? [])],
      callgrindDir && join(callgrindDir, `cg.${kind}`),
    );
    running.set(kind, { ...relay, url: (await relay.next()).url });
  }
  const json = process.env.BENCH_BODY === "json";
  const body = json ? benchBody(false) : benchBody(true, pace);
  const gapMs = Number(process.env.BENCH_GAP_MS ?? 0);
  const ask = (url, n, what = body, gap = gapMs) => {
    const answer = client.next();
    client.proc.send({ url, connections, streams: n, body: what, gapMs: gap });
    return answer;
  };
  const cpuOf = async ({ proc, next }, what) => {
    const answer = next();
    proc.send(what);
    return answer;
  };

  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const load = [];
  const figures = new Map(kinds.map((k) => [k, []]));
  try {
    // A warm-up as long as a round: a shorter one leaves V8 compiling on its background threads
    // through the first measured rounds.
    // Before it, BENCH_WARM_STREAMS streams a connection unpaced: at one connection a round's few
    // paced streams would leave the first event's path in V8's lower tiers.
    const warmStreams = Number(process.env.BENCH_WARM_STREAMS ?? 0);
    for (const [, relay] of running)
      await ask(relay.url, warmStreams, json ? body : benchBody(true, 0), 0);
    for (const [, relay] of running) await ask(relay.url, streams);
    for (let round = 0; round < rounds; round++) {
      for (const kind of kinds) {
        const relay = running.get(kind);
        load.push(loadavg()[0]);
        const direct = !relay.proc;
        const before = direct ? undefined : await cpuOf(relay, "cpu");
        const { events, failed, firsts } = await ask(relay.url, streams);
        const after = direct ? undefined : await cpuOf(relay, "done");
        const chunks = connections * streams * pacedEvents;
        const per = (f) => (direct ? Number.NaN : f(after) / chunks - f(before) / chunks);
        figures.get(kind).push({
          user: per((c) => c.cpu.user),
          system: per((c) => c.cpu.system),
          others: per((c) => c.otherThreadsUs),
          first: median(firsts),
          events,
          failed,
        });
      }
    }
  } finally {
    client.proc.kill();
    for (const [, relay] of running) relay.proc?.disconnect();
    upstream.kill();
  }

  const f1 = (x) => x.toFixed(1).padStart(6);
  console.log(
    `\n${connections} streams at once, paced ${pace} ms, ${pacedEvents} upstream chunks a stream, ${streams} streams a connection a round, ${rounds} rounds (load average ${Math.min(...load).toFixed(1)}-${Math.max(...load).toFixed(1)})\n`,
  );
  console.log(
    "| relay   | CPU µs an event, median (rounds)       | user | system | other threads | events a stream | first data event p50 ms (rounds) |",
  );
  console.log(
    "|---------|---------------------------------------|-----:|-------:|--------------:|----------------:|---------------------------------:|",
  );
  const totals = new Map();
  for (const kind of kinds) {
    const rs = figures.get(kind);
    const total = rs.map((r) => r.user + r.system);
    totals.set(kind, median(total));
    const failed = rs.reduce((a, r) => a + r.failed, 0);
    console.log(
      `| ${kind.padEnd(7)} | ${f1(median(total))} (${total.map((x) => x.toFixed(1)).join(", ")})`.padEnd(
        50,
      ) +
        `| ${f1(median(rs.map((r) => r.user)))} | ${f1(median(rs.map((r) => r.system)))} | ${f1(median(rs.map((r) => r.others))).padStart(13)} | ${(rs[0].events / (connections * streams)).toFixed(0).padStart(15)} | ${median(rs.map((r) => r.first)).toFixed(3)} (${rs.map((r) => r.first.toFixed(3)).join(", ")}) |${failed ? ` ${failed} failed` : ""}`,
    );
  }
  if (callgrindDir) printInstructions(callgrindDir, kinds, connections * streams * pacedEvents);
  const firstOf = (kind) => median(figures.get(kind).map((r) => r.first));
  if (figures.has("direct"))
    for (const kind of kinds.filter((k) => k !== "direct"))
      console.log(
        `${kind} adds ${(firstOf(kind) - firstOf("direct")).toFixed(3)} ms to the first data event`,
      );
  const gw = totals.get("gateway");
  if (gw !== undefined)
    for (const kind of kinds.filter((k) => k !== "gateway" && k !== "direct"))
      console.log(`gateway over ${kind}: ${(gw - totals.get(kind)).toFixed(1)} µs an event`);
}

/**
 * Each relay's main-thread instructions per upstream chunk, from callgrind's dumps (one a round;
 * the main thread's file ends in -01), and where the dumps are for callgrind_annotate.
 */
function printInstructions(dir, kinds, chunks) {
  const files = readdirSync(dir);
  console.log(`\ninstructions of each relay's main thread an event (callgrind; dumps in ${dir}):`);
  for (const kind of kinds) {
    const dumps = files.filter((f) => f.startsWith(`cg.${kind}.`) && /\.\d+-01$/.test(f));
    const counts = dumps.map((f) => {
      const total = /^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, f), "utf8"));
      return Number(total?.[1] ?? Number.NaN) / chunks;
    });
    console.log(
      `  ${kind.padEnd(7)} ${counts.map((c) => `${(c / 1000).toFixed(1)} k`).join(", ")}`,
    );
  }
}

if (role === "--relay") await serveRelay(process.argv[3], process.argv[4]);
else if (role === "--client") await serveClient();
else await main();
