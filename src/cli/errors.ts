import { statSync } from "node:fs";
import { join } from "node:path";
import { isPostgresUrl } from "../store/postgres/url.js";

/** A problem the user can fix: printed as one line, exit code 1, no stack trace. */
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = "UserError";
  }
}

/** Exit code of a command line the CLI cannot run as given (getopt's and argparse's 2). */
export const usageExitCode = 2;

/** A flag or argument the command cannot use: one line, exit code 2. */
export class UsageError extends UserError {
  constructor(message: string) {
    super(message, usageExitCode);
    this.name = "UsageError";
  }
}

/**
 * The commands that open a gateway's SQLite file directly refuse a postgres:// URL plainly (the
 * URL's password is not repeated): on Postgres, `instead` is how to do the same. A --db they
 * cannot use is the command line's mistake, as a directory is.
 */
export function sqliteFileOnly(db: string, instead: string): void {
  if (isPostgresUrl(db))
    throw new UsageError(`--db takes a SQLite file here, not a Postgres URL; ${instead}`);
}

/** Why the --db file could not be opened, as one line, when it is something the user can fix. */
export function databaseProblem(db: string, err: unknown): UsageError | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const directory =
    db !== ":memory:" && statSync(db, { throwIfNoEntry: false })?.isDirectory() === true;
  if (code === "EISDIR" || directory)
    return new UsageError(
      `--db ${db} is a directory; give a database file, such as --db ${join(db, "gateway.db")}`,
    );
  if (code === "SQLITE_NOTADB" || code === "SQLITE_CORRUPT")
    return new UsageError(
      `--db ${db} is not a gateway database (not an SQLite file); give another file, or a new name to create one`,
    );
  return undefined;
}

/** `open()`, with a --db file it cannot open reported as `databaseProblem` says. */
export function openingDatabase<T>(db: string, open: () => T): T {
  try {
    return open();
  } catch (err) {
    throw databaseProblem(db, err) ?? err;
  }
}
