import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { openingDatabase, sqliteFileOnly, UsageError, UserError } from "./errors.js";

/**
 * A fresh one-time owner link minted from the database file of a `gateway serve` running on this
 * machine. Whoever can open the file is the owner already, so the file is the authority, not a
 * key (`gateway owner-link`, `gateway dashboard`, and `gateway login` on the serve's machine).
 */

export interface LocalOwnerLink {
  url: string;
  accountId: string;
  /** Where the serve listens, as it recorded. */
  serveUrl: string;
}

export interface LocalOwnerLinkOptions {
  /** The dashboard page the link leads to once it has signed the browser in. */
  next?: string;
  /** Mint only if the serve on the file is the gateway at this URL (else a UserError). */
  forBaseUrl?: string;
  /** The origin the link is built on (default: the serve's recorded URL). */
  linkOrigin?: string;
}

export async function localOwnerLink(
  dbPath: string,
  options: LocalOwnerLinkOptions = {},
): Promise<LocalOwnerLink> {
  sqliteFileOnly(
    dbPath,
    "on Postgres each gateway prints its own owner link when it starts (serve --json: owner_url)",
  );
  if (dbPath === ":memory:") {
    throw new UsageError(
      "an in-memory database belongs to its server alone; use its start-up link",
    );
  }
  if (!existsSync(dbPath)) {
    throw new UserError(
      `no database at ${dbPath}; run this where \`gateway serve\` runs, or pass --db`,
    );
  }
  // Loaded here: the other client commands should not pay for SQLite.
  const { openDatabase } = await import("../store/sqlite/db.js");
  const { readLiveServeRecord } = await import("../store/serve-record.js");
  const { SqliteServeRecord } = await import("../store/sqlite/serve-record.js");
  const { SqliteSessions } = await import("../store/sqlite/sessions.js");
  const { createOwnerLink } = await import("../server/auth/owner-session.js");
  const db = openingDatabase(dbPath, () => openDatabase(dbPath));
  try {
    const server = await readLiveServeRecord(new SqliteServeRecord(db));
    if (!server) {
      throw new UserError(
        `no running \`gateway serve\` uses ${dbPath}; start one (it prints an owner link as it starts)`,
      );
    }
    if (!server.ownerAccountId) {
      throw new UserError("the running gateway has no account whose dashboard a link could open");
    }
    if (options.forBaseUrl && !sameServer(server.url, options.forBaseUrl)) {
      throw new UserError(
        `the gateway on ${dbPath} listens on ${server.url}, not on ${options.forBaseUrl}`,
      );
    }
    const url = await createOwnerLink(
      new SqliteSessions(db),
      server.ownerAccountId,
      options.linkOrigin ?? server.url,
      options.next,
    );
    return { url, accountId: server.ownerAccountId, serveUrl: server.url };
  } finally {
    db.close();
  }
}

const loopbackNames = new Set(["localhost", "127.0.0.1", "[::1]", "::1", "0.0.0.0"]);

/**
 * Whether `recorded` (where a serve on this machine says it listens) and `asked` (a URL a command
 * was given) reach the same server: same scheme and port, and a host that is this machine.
 */
export function sameServer(recorded: string, asked: string): boolean {
  let a: URL;
  let b: URL;
  try {
    a = new URL(recorded);
    b = new URL(asked);
  } catch {
    return false;
  }
  if (a.protocol !== b.protocol || a.port !== b.port) return false;
  if (a.hostname === b.hostname) return true;
  return isThisMachine(a.hostname) && isThisMachine(b.hostname);
}

function isThisMachine(host: string): boolean {
  if (loopbackNames.has(host) || host.startsWith("127.")) return true;
  const bare = host.replace(/^\[|\]$/g, "");
  return Object.values(networkInterfaces()).some((list) =>
    (list ?? []).some((address) => address.address === bare),
  );
}
