// No import of pg here: a SQLite gateway reads its --db through this module and never loads pg.

/** The environment variable that selects a Postgres database when `--db` is not given. */
const databaseUrlVariable = "GATEWAY_DB_URL";

export function isPostgresUrl(value: string | undefined): value is string {
  return value !== undefined && /^postgres(ql)?:\/\//i.test(value);
}

/**
 * The Postgres URL the gateway should run on, or null for SQLite: an explicit `--db` wins (a
 * file path or `:memory:` is SQLite), and without one `GATEWAY_DB_URL` decides.
 */
export function selectPostgresUrl(
  db: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string | null {
  if (db !== undefined) return isPostgresUrl(db) ? db : null;
  const fromEnv = env[databaseUrlVariable];
  if (fromEnv === undefined || fromEnv === "") return null;
  if (!isPostgresUrl(fromEnv)) {
    throw new Error(`${databaseUrlVariable} must be a postgres:// URL`);
  }
  return fromEnv;
}

/** The URL without its password, for messages and logs. */
export function describePostgresUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.password = "";
    parsed.search = "";
    return parsed.toString();
  } catch {
    return "postgres://(unparsable URL)";
  }
}
