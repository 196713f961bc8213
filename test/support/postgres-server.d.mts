export interface PostgresServer {
  host: string;
  port: number;
  /** The server's temporary directory, which also holds its unix socket. */
  socketDir: string;
  /** The postmaster's own pid. */
  pid: number;
  /** A connection URL for `database` (the server's `postgres` database by default). */
  url(database?: string): string;
  stop(): Promise<void>;
}

/** The directory holding initdb and postgres; throws how to install them when there is none. */
export function findPostgresBin(): string;

/** `settings`: more `name=value` server settings. */
export function startPostgresServer(settings?: string[]): Promise<PostgresServer>;
