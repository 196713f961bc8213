import { createHmac } from "node:crypto";
import type { Context } from "hono";
import { getCookie } from "hono/cookie";
import { cliCommand } from "../../cli-command.js";
import { constantTimeEqual, hashSecret, randomToken } from "../../store/secrets.js";
import type { SessionsRepository } from "../../store/sessions.js";
import { GatewayError, PlainTextError } from "../errors.js";
import type { OwnerSession } from "../http/context.js";

/**
 * The owner's dashboard session for a local gateway. `gateway serve` prints a one-time owner URL
 * (Jupyter's token URL idea); opening it trades the token for an HttpOnly, SameSite=Strict cookie.
 * Tokens and session ids are stored only as hashes.
 */

export const sessionCookieName = "gateway_session";
export const sessionTtlSeconds = 7 * 24 * 60 * 60;
/** The dashboard page that asked for a sign-in, to go back to once the owner link is opened. */
export const returnToCookieName = "gateway_return_to";
export const returnToTtlSeconds = 30 * 60;

/**
 * A `next` target is a dashboard path of this gateway and nothing else: no other origin, no
 * protocol-relative `//host` (also when spelled with tabs, which the URL parser drops), no
 * backslash, which browsers read as `/`.
 */
export function safeReturnPath(value: string | undefined): string | undefined {
  if (!value?.startsWith("/") || value.includes("\\")) return undefined;
  const base = "http://gateway.invalid";
  let url: URL;
  try {
    url = new URL(value, base);
  } catch {
    return undefined;
  }
  if (url.origin !== base) return undefined;
  if (url.pathname !== "/dashboard" && !url.pathname.startsWith("/dashboard/")) return undefined;
  if (url.pathname === "/dashboard/login") return undefined;
  return url.pathname + url.search;
}

/**
 * Mints a one-time owner URL for the account. The token works once; only its hash is stored.
 * Takes the repository alone: `gateway owner-link` mints from another process. `next`: the
 * dashboard page the link leads to once it has signed the browser in.
 */
export async function createOwnerLink(
  sessions: SessionsRepository,
  accountId: string,
  baseUrl: string,
  next?: string,
): Promise<string> {
  const token = randomToken(32);
  await sessions.createOwnerLink(hashSecret(token), accountId, Date.now());
  const then = next && safeReturnPath(next) ? `&next=${encodeURIComponent(next)}` : "";
  return `${baseUrl.replace(/\/+$/, "")}/dashboard/login?token=${token}${then}`;
}

function csrfTokenFor(sessionValue: string): string {
  return createHmac("sha256", sessionValue).update("gateway dashboard csrf").digest("base64url");
}

export class OwnerSessions {
  constructor(private readonly sessions: SessionsRepository) {}

  /** Spends an owner-link token; returns the new session's cookie value, or undefined. */
  async redeemOwnerLink(token: string, now: number): Promise<string | undefined> {
    const value = randomToken(32);
    const accountId = await this.sessions.redeemOwnerLink(
      hashSecret(token),
      {
        tokenHash: hashSecret(value),
        // Only a hash is kept: the CSRF token is re-derived from the cookie when needed.
        csrfTokenHash: hashSecret(csrfTokenFor(value)),
        expiresAt: now + sessionTtlSeconds * 1000,
      },
      now,
    );
    return accountId === undefined ? undefined : value;
  }

  async find(cookieValue: string | undefined, now: number): Promise<OwnerSession | undefined> {
    if (!cookieValue) return undefined;
    const id = hashSecret(cookieValue);
    const row = await this.sessions.findSession(id);
    if (!row || row.expires_at <= now) return undefined;
    return { accountId: row.account_id, id, csrfToken: csrfTokenFor(cookieValue) };
  }

  /** Sign-out: the session's cookie opens nothing from now on. */
  end(session: OwnerSession): Promise<void> {
    return this.sessions.deleteSession(session.id);
  }
}

/**
 * The owner session of a dashboard JSON request: 401 without one; writes also need the CSRF
 * token in `x-csrf-token`.
 */
export async function requireOwnerSession(
  c: Context,
  sessions: OwnerSessions,
  now: number,
  write: boolean,
): Promise<OwnerSession> {
  const found = await sessions.find(getCookie(c, sessionCookieName), now);
  if (!found) {
    throw new PlainTextError(
      401,
      `no dashboard session: run \`${cliCommand("dashboard")}\` where \`gateway serve\` runs, or open the owner URL it printed`,
      "session_required",
    );
  }
  if (write && !csrfTokenMatches(found, c.req.header("x-csrf-token"))) {
    throw new GatewayError(
      403,
      "forbidden",
      "Missing or invalid CSRF token (send it in x-csrf-token).",
    );
  }
  return found;
}

/** Constant time, so the token cannot be guessed byte by byte from response timings. */
export function csrfTokenMatches(session: OwnerSession, presented: string | undefined): boolean {
  return typeof presented === "string" && constantTimeEqual(presented, session.csrfToken);
}

/**
 * A state-changing dashboard request must come from a page of this gateway. Browsers send
 * Sec-Fetch-Site and Origin; a text browser or curl sends neither and is covered by the CSRF
 * token and the SameSite=Strict cookie.
 */
export function isSameOriginRequest(
  origin: string | undefined,
  fetchSite: string | undefined,
  ownOrigin: string,
): boolean {
  if (fetchSite && fetchSite !== "same-origin" && fetchSite !== "none") return false;
  if (origin === undefined) return true;
  // Privacy settings can make a browser send "null"; its Sec-Fetch-Site still tells the truth.
  if (origin === "null") return fetchSite === "same-origin";
  return origin === ownOrigin;
}
