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

/**
 * The commands that open a gateway's SQLite file directly refuse a postgres:// URL plainly (the
 * URL's password is not repeated): on Postgres, `instead` is how to do the same.
 */
export function sqliteFileOnly(db: string, instead: string): void {
  if (isPostgresUrl(db))
    throw new UserError(`--db takes a SQLite file here, not a Postgres URL; ${instead}`);
}
