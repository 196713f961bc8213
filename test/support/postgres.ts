import { randomBytes } from "node:crypto";
import { connect, createServer, type Server, type Socket } from "node:net";
import pg from "pg";
import { inject } from "vitest";

declare module "vitest" {
  export interface ProvidedContext {
    /** The run's PostgreSQL server (test/support/postgres-global.ts), or why there is none. */
    postgres: { url: string } | { error: string };
  }
}

/**
 * A new, empty database on the run's PostgreSQL server, for one test file (or one test that
 * needs a fresh schema). Returns its URL. Fails, naming what to install, when the machine has no
 * PostgreSQL server binaries: the Postgres tests are never silently skipped.
 */
export async function createTestDatabase(): Promise<string> {
  const server = inject("postgres");
  if ("error" in server) throw new Error(`no PostgreSQL server for the tests: ${server.error}`);
  const name = `test_${process.pid}_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(server.url);
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * Counts the statements sent through `pool` from now on: the answer is the count so far, of all
 * of them or of the named prepared statement `name`.
 */
export function countQueries(pool: pg.Pool): (name?: string) => number {
  const sent = new Map<string | undefined, number>();
  const query = pool.query.bind(pool);
  pool.query = ((...args: Parameters<typeof query>) => {
    const config = args[0] as { name?: string } | string;
    const name = typeof config === "object" ? config.name : undefined;
    sent.set(undefined, (sent.get(undefined) ?? 0) + 1);
    if (name !== undefined) sent.set(name, (sent.get(name) ?? 0) + 1);
    return query(...args);
  }) as typeof pool.query;
  return (name) => sent.get(name) ?? 0;
}

/**
 * The next statement named `name` sent through `pool` fails as if the connection dropped before
 * its answer came: after the database ran it (`ran`) or before. The answer says whether it has.
 */
export function loseAnswerOnce(pool: pg.Pool, name: string, ran: boolean): () => boolean {
  let lost = false;
  const query = pool.query.bind(pool);
  pool.query = (async (...args: Parameters<typeof query>) => {
    const config = args[0] as { name?: string } | string;
    if (lost || typeof config !== "object" || config.name !== name) return query(...args);
    lost = true;
    if (ran) await query(...args);
    throw new Error("Connection terminated unexpectedly");
  }) as typeof pool.query;
  return () => lost;
}

/**
 * A relay to a database the test can cut (every connection dropped, new ones refused, as a server
 * that went away) and mend on the same port.
 */
export interface Relay {
  /** The database URL, through the relay. */
  url: string;
  cut(): Promise<void>;
  mend(): Promise<void>;
  close(): Promise<void>;
}

export async function relayTo(databaseUrl: string): Promise<Relay> {
  const target = new URL(databaseUrl);
  const sockets = new Set<Socket>();
  const listen = (port: number) =>
    new Promise<Server>((resolve, reject) => {
      const server = createServer((client) => {
        const upstream = connect(Number(target.port), target.hostname);
        for (const socket of [client, upstream]) {
          sockets.add(socket);
          socket.on("close", () => sockets.delete(socket));
          socket.on("error", () => {
            client.destroy();
            upstream.destroy();
          });
        }
        client.pipe(upstream).pipe(client);
      });
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve(server));
    });
  let server: Server | undefined = await listen(0);
  const port = (server.address() as { port: number }).port;
  const stop = async () => {
    const closing = server;
    server = undefined;
    for (const socket of sockets) socket.destroy();
    if (closing) await new Promise((resolve) => closing.close(resolve));
  };
  const url = new URL(databaseUrl);
  url.port = String(port);
  return {
    url: url.toString(),
    cut: stop,
    async mend() {
      server ??= await listen(port);
    },
    close: stop,
  };
}
