// Apart from the lock itself (serve-lock.ts), which loads better-sqlite3: `gateway serve` tells
// this refusal from others before it knows which database it opens.

/**
 * A second gateway on a database file that one already serves: refused before it opens the
 * database, so the running one's settlement journal and serve record stay as they are.
 */
export class GatewayAlreadyRunning extends Error {
  constructor(
    readonly db: string,
    readonly running: { pid: number; url: string } | undefined,
  ) {
    const who = running
      ? `another gateway (pid ${running.pid}, ${running.url}) is serving ${db}`
      : `another gateway is starting on ${db}`;
    super(`${who}; stop it first, or use another database (--db other.db)`);
    this.name = "GatewayAlreadyRunning";
  }
}
