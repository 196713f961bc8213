import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import {
  csrfTokenMatches,
  isSameOriginRequest,
  type OwnerSessions,
  returnToCookieName,
  returnToTtlSeconds,
  safeReturnPath,
  sessionCookieName,
} from "../auth/owner-session.js";
import { isTooLarge, readFormFields } from "../http/body.js";
import type { AppEnv, OwnerSession } from "../http/context.js";
import {
  type ForwardingOptions,
  ownOrigin,
  reachedOverTls,
  requestHeader,
  requestTrace,
} from "../http/request.js";
import {
  decodeDraft,
  draftOf,
  encodeDraft,
  type FormDraft,
  formDraftCookieName,
  returnPageOf,
} from "./form-draft.js";
import { forbiddenPage, type Page, signInNeededPage, unreadableFormPage } from "./pages.js";

/**
 * Headers for every dashboard page: never cached (pages carry CSRF tokens and, once, a new key),
 * never framed (an approval button must not be clickjacked), no referrer to other sites, and no
 * script but the gateway's own file (inline scripts stay blocked). (Not `no-referrer`: Chromium then sends `Origin: null` on same-origin form posts.)
 */
const pageHeaders: Record<string, string> = {
  "content-type": "text/html; charset=utf-8",
  "cache-control": "no-store",
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "x-frame-options": "DENY",
  "referrer-policy": "same-origin",
  "x-content-type-options": "nosniff",
};

/** What serve's line says of a page that refuses, by its status. */
const pageRefusalCodes: Record<Exclude<Page["status"], 200>, string> = {
  400: "bad_request",
  401: "session_required",
  403: "forbidden",
  404: "not_found",
  429: "rate_limit_exceeded",
};

export function sendPage(c: Context, page: Page): Response {
  if (page.status !== 200) {
    const trace = requestTrace(c);
    if (trace && trace.errorCode === undefined) trace.errorCode = pageRefusalCodes[page.status];
  }
  return c.body(page.html, page.status, pageHeaders);
}

/** A form field as one string; repeated or file fields count as missing. */
export function formField(form: Record<string, unknown>, name: string): string | undefined {
  const value = form[name];
  return typeof value === "string" ? value : undefined;
}

/** The owner session of the request's cookie, if any. */
export function currentSession(
  c: Context,
  sessions: OwnerSessions,
  now: number,
): Promise<OwnerSession | undefined> {
  return sessions.find(getCookie(c, sessionCookieName), now);
}

/**
 * The check of access `owner-page`. A GET without a session gets the sign-in page, which
 * remembers the page so the owner link leads back to it. A POST is a form: session, same origin
 * and CSRF token, in that order, each refusal a page saying which; a form of the gateway's own
 * page without a session also leads back to its page, filled in as it was (`signInForForm`).
 */
export function ownerPageGuard(
  sessions: OwnerSessions,
  options: { now: () => number; publicOrigin?: string } & ForwardingOptions,
  method: string,
) {
  if (method === "GET") {
    return async (c: Context<AppEnv>): Promise<Response | undefined> => {
      const session = await currentSession(c, sessions, options.now());
      if (!session) return signIn(c, options);
      c.set("owner", session);
      return undefined;
    };
  }
  return async (c: Context<AppEnv>): Promise<Response | undefined> => {
    const session = await currentSession(c, sessions, options.now());
    const sameOrigin = isSameOriginRequest(
      requestHeader(c, "origin"),
      requestHeader(c, "sec-fetch-site"),
      ownOrigin(options.publicOrigin, c),
    );
    if (!session) {
      return sameOrigin ? signInForForm(c, options) : sendPage(c, signInNeededPage());
    }
    if (!sameOrigin) {
      return sendPage(c, forbiddenPage("Cross-origin form posts are not accepted."));
    }
    let form: Record<string, unknown> | undefined;
    try {
      form = await readFormFields(c);
    } catch (err) {
      if (isTooLarge(err)) throw err;
    }
    if (!form) return sendPage(c, unreadableFormPage());
    if (!csrfTokenMatches(session, formField(form, "csrf_token"))) {
      return sendPage(
        c,
        forbiddenPage("The form's CSRF token is missing or wrong. Reload the page and try again."),
      );
    }
    c.set("owner", session);
    c.set("form", form);
    return undefined;
  };
}

/** The sign-in page for a GET: remembers the page, so the owner link leads back to it. */
function signIn(c: Context, options: ForwardingOptions): Response {
  const url = new URL(c.req.url);
  const returnTo = safeReturnPath(url.pathname + url.search);
  if (returnTo) rememberUntilSignIn(c, returnToCookieName, returnTo, options);
  return sendPage(c, signInNeededPage(returnTo));
}

/**
 * The sign-in page for a form of the gateway's own page posted without a session (it ended while
 * the form was open): nothing is done, the owner link leads back to the form's page, and what was
 * typed into a form that keeps a draft comes back with it.
 */
async function signInForForm(c: Context, options: ForwardingOptions): Promise<Response> {
  let form: Record<string, unknown> | undefined;
  try {
    form = await readFormFields(c);
  } catch (err) {
    if (isTooLarge(err)) throw err;
  }
  const returnTo = returnPageOf(c.req.path, form);
  if (returnTo) rememberUntilSignIn(c, returnToCookieName, returnTo, options);
  const draft = form && draftOf(c.req.path, form);
  if (draft) rememberUntilSignIn(c, formDraftCookieName, encodeDraft(draft), options);
  // An older form's draft is not this one's: it would fill in a form the owner did not just send.
  else if (getCookie(c, formDraftCookieName) !== undefined) forgetFormDraft(c);
  return sendPage(c, signInNeededPage(returnTo, { draft }));
}

/** A cookie of the sign-in's way back: what the page after the owner link needs. */
function rememberUntilSignIn(
  c: Context,
  name: string,
  value: string,
  options: ForwardingOptions,
): void {
  setCookie(c, name, value, {
    httpOnly: true,
    // Lax: the owner link arrives as a top-level navigation from a terminal.
    sameSite: "Lax",
    path: "/dashboard",
    maxAge: returnToTtlSeconds,
    secure: reachedOverTls(c, options),
  });
}

function forgetFormDraft(c: Context): void {
  deleteCookie(c, formDraftCookieName, { path: "/dashboard" });
}

/** The draft of a form posted while signed out, taken once: the next page has none. */
export function takeFormDraft(c: Context): FormDraft | undefined {
  const value = getCookie(c, formDraftCookieName);
  if (value === undefined) return undefined;
  forgetFormDraft(c);
  return decodeDraft(value);
}
