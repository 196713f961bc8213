import type { Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { microToIdr } from "../../store/money.js";
import type { AppEnv } from "../app-env.js";
import { DeviceCodes, formatUserCode, normalizeUserCode } from "../dashboard/device-codes.js";
import { formField, sendPage } from "../dashboard/http.js";
import {
  csrfTokenMatches,
  isSameOriginRequest,
  type OwnerSession,
  OwnerSessions,
  returnToCookieName,
  returnToTtlSeconds,
  safeReturnPath,
  sessionCookieName,
  sessionTtlSeconds,
} from "../dashboard/owner-session.js";
import {
  approvalPage,
  approvedPage,
  dashboardPage,
  dashboardScriptPath,
  decisionRefusedPage,
  deniedPage,
  forbiddenPage,
  ownerLinkInvalidPage,
  signInNeededPage,
  tooManyWrongCodesPage,
  unreadableFormPage,
  userCodeFormPage,
} from "../dashboard/pages.js";
import { GatewayError } from "../errors.js";
import { ownOrigin } from "../http/cors.js";
import { WindowCounter } from "../limits/window-counter.js";
import type { Services } from "../services.js";
import { quota } from "./account.js";
import { byokView } from "./admin.js";
import { installDashboardAccountRoutes } from "./dashboard-account.js";
import { installDeviceAuthRoutes } from "./device-auth.js";
import { installDashboardKeyRoutes, installToolKeyRoutes, mintKey } from "./tool-keys.js";

/**
 * The owner's side of login and keys:
 *   GET  /dashboard/login?token=...&next=/dashboard/...
 *                                         one-time owner URL -> session cookie, 303 to `next`, else
 *                                         to the page that asked for a sign-in, else /dashboard
 *   GET  /dashboard                       balance, limits, usage charts, recent requests, keys, BYOK
 *   GET  /dashboard/device?user_code=...  the approval page (or a form asking for the code)
 *   POST /dashboard/device/approve|deny   form: user_code, csrf_token
 *   POST /dashboard/keys                  form: label, shared?, csrf_token (303; the next GET shows
 *                                         the new key, once)
 *   POST /dashboard/keys/:id/revoke       form: csrf_token
 * plus the JSON routes of device-auth.ts and tool-keys.ts.
 */

export const defaultDeviceCodeTtlSeconds = 600;
export const defaultDevicePollIntervalSeconds = 5;
/** Unknown, expired or used codes one owner session may enter per minute before a 429 page. */
const maxWrongCodesPerMinute = 10;
/** Dashboard forms are a few short fields. */
const formBodyLimitBytes = 16 * 1024;

/** The dashboard's usage charts cover this many days, today included. */
const usageDays = 30;
const recentRequestCount = 20;
const dayMs = 86_400_000;
const flashTtlMs = 5 * 60_000;

interface Flash {
  notice?: string;
  newKey?: { label: string; value: string };
  at: number;
}

const utcDayStart = (ms: number) => ms - (ms % dayMs);

/** The copy button: progressive enhancement, the key stays selectable text without it. */
const dashboardScript = `for (const button of document.querySelectorAll("button[data-copy]")) {
  const source = document.getElementById(button.dataset.copy);
  button.hidden = false;
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(source.textContent.trim());
      button.textContent = "Copied";
    } catch {
      const range = document.createRange();
      range.selectNodeContents(source);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      button.textContent = "Selected: press Ctrl+C";
    }
  });
}
`;

type Guarded =
  | { ok: true; session: OwnerSession; form: Record<string, unknown> }
  | { ok: false; response: Response };

export function installDashboardRoutes(app: Hono<AppEnv>, s: Services): void {
  const devices = new DeviceCodes(s.repos.deviceCodes, {
    ttlSeconds: s.options.deviceCodeTtlSeconds ?? defaultDeviceCodeTtlSeconds,
    intervalSeconds: s.options.devicePollIntervalSeconds ?? defaultDevicePollIntervalSeconds,
  });
  const sessions = new OwnerSessions(s.repos.sessions);
  // Per owner session: a page (or a script holding the cookie) cannot walk the code space.
  const wrongCodes = new WindowCounter(60_000);
  installDeviceAuthRoutes(app, s, devices);
  installToolKeyRoutes(app, s);
  installDashboardKeyRoutes(app, s, sessions);
  installDashboardAccountRoutes(app, s, sessions);

  const currentSession = (c: Context) =>
    sessions.find(getCookie(c, sessionCookieName), s.options.now());

  /** The sign-in page for a GET: remembers the page, so the owner link leads back to it. */
  const signIn = (c: Context) => {
    const url = new URL(c.req.url);
    const returnTo = safeReturnPath(url.pathname + url.search);
    if (returnTo) {
      setCookie(c, returnToCookieName, returnTo, {
        httpOnly: true,
        // Lax: the owner link arrives as a top-level navigation from a terminal.
        sameSite: "Lax",
        path: "/dashboard",
        maxAge: returnToTtlSeconds,
        secure: url.protocol === "https:",
      });
    }
    return sendPage(c, signInNeededPage(returnTo));
  };

  /** Session, same origin and CSRF token, in that order; each failure is a page saying which. */
  const guardedForm = async (c: Context): Promise<Guarded> => {
    const session = await currentSession(c);
    if (!session) return { ok: false, response: sendPage(c, signInNeededPage()) };
    if (
      !isSameOriginRequest(c.req.header("origin"), c.req.header("sec-fetch-site"), ownOrigin(s, c))
    ) {
      return {
        ok: false,
        response: sendPage(c, forbiddenPage("Cross-origin form posts are not accepted.")),
      };
    }
    let form: Record<string, unknown>;
    try {
      form = await c.req.parseBody();
    } catch {
      return { ok: false, response: sendPage(c, unreadableFormPage()) };
    }
    if (!csrfTokenMatches(session, formField(form, "csrf_token"))) {
      return {
        ok: false,
        response: sendPage(
          c,
          forbiddenPage(
            "The form's CSRF token is missing or wrong. Reload the page and try again.",
          ),
        ),
      };
    }
    return { ok: true, session, form };
  };

  app.use(
    "/dashboard/*",
    bodyLimit({
      maxSize: formBodyLimitBytes,
      onError: (c) => c.text("form too large", 413),
    }),
  );

  app.get("/dashboard/login", async (c) => {
    const now = s.options.now();
    const token = c.req.query("token");
    const value = token ? await sessions.redeemOwnerLink(token, now) : undefined;
    const returnTo =
      safeReturnPath(c.req.query("next")) ??
      safeReturnPath(getCookie(c, returnToCookieName)) ??
      "/dashboard";
    if (value) {
      if (getCookie(c, returnToCookieName) !== undefined)
        deleteCookie(c, returnToCookieName, { path: "/dashboard" });
      setCookie(c, sessionCookieName, value, {
        httpOnly: true,
        sameSite: "Strict",
        path: "/",
        maxAge: sessionTtlSeconds,
        secure: new URL(c.req.url).protocol === "https:",
      });
      return c.redirect(returnTo, 303);
    }
    // A reused link in a browser that already holds a session is harmless: go on.
    if (await currentSession(c)) return c.redirect(returnTo, 303);
    return sendPage(c, ownerLinkInvalidPage());
  });

  /**
   * What the next GET /dashboard of a session shows once (post/redirect/get): a created key lives
   * here, in this process's memory only, until that one view or a few minutes pass.
   */
  const flashes = new Map<string, Flash>();
  const setFlash = (sessionId: string, flash: Omit<Flash, "at">) => {
    const now = s.options.now();
    for (const [id, f] of flashes) if (now - f.at > flashTtlMs) flashes.delete(id);
    flashes.set(sessionId, { ...flash, at: now });
  };
  const takeFlash = (sessionId: string): Omit<Flash, "at"> => {
    const flash = flashes.get(sessionId);
    flashes.delete(sessionId);
    if (!flash || s.options.now() - flash.at > flashTtlMs) return {};
    return { notice: flash.notice, newKey: flash.newKey };
  };

  const dashboardView = (
    session: OwnerSession,
    extra: { notice?: string; newKey?: { label: string; value: string } } = {},
  ) => {
    const account = s.store.getAccount(session.accountId);
    if (!account) throw new GatewayError(404, "not_found", "No such account.");
    const now = s.options.now();
    const since = utcDayStart(now) - (usageDays - 1) * dayMs;
    const byDay = new Map(s.store.usageDaily(account.id, since).map((d) => [d.date, d]));
    const daily = Array.from({ length: usageDays }, (_, i) => {
      const date = new Date(since + i * dayMs).toISOString().slice(0, 10);
      const d = byDay.get(date);
      return { date, requests: d?.requests ?? 0, cost_idr: d?.cost_idr ?? 0 };
    });
    return dashboardPage({
      accountId: account.id,
      csrfToken: session.csrfToken,
      quota: quota(s, account),
      usage: {
        days: usageDays,
        daily,
        models: s.store.usageByModel(account.id, since).map((m) => ({
          model: m.model,
          requests: m.requests,
          cost_idr: microToIdr(m.cost_micro),
        })),
        recent: s.store.recentRequests(account.id, recentRequestCount),
      },
      keys: s.store.listKeys(account.id),
      byok: s.store.listByok(account.id).map(byokView),
      ...extra,
    });
  };

  app.get(dashboardScriptPath, (c) =>
    c.body(dashboardScript, 200, {
      "content-type": "text/javascript; charset=utf-8",
      "cache-control": "no-cache",
      "x-content-type-options": "nosniff",
    }),
  );

  app.get("/dashboard", async (c) => {
    const session = await currentSession(c);
    if (!session) return signIn(c);
    return sendPage(c, dashboardView(session, takeFlash(session.id)));
  });

  app.post("/dashboard/keys", async (c) => {
    const guard = await guardedForm(c);
    if (!guard.ok) return guard.response;
    const { session, form } = guard;
    const label = (formField(form, "label") ?? "").trim().slice(0, 100);
    if (!label)
      return sendPage(c, {
        ...dashboardView(session, { notice: "A key needs a label." }),
        status: 400,
      });
    try {
      const created = mintKey(s, {
        accountId: session.accountId,
        parentKeyId: null,
        label,
        shared: formField(form, "shared") !== undefined,
        limiterId: `session:${session.id}`,
      });
      setFlash(session.id, { newKey: { label, value: created.key } });
      // Post/redirect/get: a reload shows the list, and neither posts again nor shows the key.
      return c.redirect("/dashboard", 303);
    } catch (err) {
      if (!(err instanceof GatewayError) || err.status !== 429) throw err;
      return sendPage(c, { ...dashboardView(session, { notice: err.message }), status: 429 });
    }
  });

  app.post("/dashboard/keys/:id/revoke", async (c) => {
    const guard = await guardedForm(c);
    if (!guard.ok) return guard.response;
    const key = s.store.getKey(c.req.param("id"));
    if (key && key.account_id === guard.session.accountId && !key.revoked_at) {
      s.store.revokeKey(key.id, s.options.now());
      setFlash(guard.session.id, { notice: `Key "${key.label}" revoked.` });
    }
    // Post/redirect/get: a reload of the list does not post the form again.
    return c.redirect("/dashboard", 303);
  });

  app.get("/dashboard/device", async (c) => {
    const session = await currentSession(c);
    if (!session) return signIn(c);
    const raw = c.req.query("user_code");
    if (raw === undefined || raw.trim() === "") return sendPage(c, userCodeFormPage());
    const now = s.options.now();
    if (wrongCodes.used(session.id, now) >= maxWrongCodesPerMinute)
      return sendPage(c, tooManyWrongCodesPage(maxWrongCodesPerMinute));
    const userCode = normalizeUserCode(raw);
    const found = userCode ? await devices.lookup(userCode, now) : undefined;
    if (!userCode || !found?.ok) {
      wrongCodes.tryTake(session.id, Number.POSITIVE_INFINITY, now);
      return sendPage(c, decisionRefusedPage(found?.ok === false ? found.refusal : "unknown"));
    }
    return sendPage(
      c,
      approvalPage({
        userCode: formatUserCode(userCode),
        clientName: found.row.client_name,
        accountId: session.accountId,
        expiresInSeconds: (found.row.expires_at - now) / 1000,
        csrfToken: session.csrfToken,
      }),
    );
  });

  for (const decision of ["approve", "deny"] as const) {
    app.post(`/dashboard/device/${decision}`, async (c) => {
      const guard = await guardedForm(c);
      if (!guard.ok) return guard.response;
      const now = s.options.now();
      const sessionId = guard.session.id;
      if (wrongCodes.used(sessionId, now) >= maxWrongCodesPerMinute)
        return sendPage(c, tooManyWrongCodesPage(maxWrongCodesPerMinute));
      const userCode = normalizeUserCode(formField(guard.form, "user_code") ?? "");
      const outcome = !userCode
        ? undefined
        : decision === "approve"
          ? await devices.approve(userCode, guard.session.accountId, now)
          : await devices.deny(userCode, now);
      if (!userCode || !outcome?.ok) {
        wrongCodes.tryTake(sessionId, Number.POSITIVE_INFINITY, now);
        return sendPage(
          c,
          decisionRefusedPage(outcome?.ok === false ? outcome.refusal : "unknown"),
        );
      }
      const shown = formatUserCode(userCode);
      return sendPage(c, decision === "approve" ? approvedPage(shown) : deniedPage(shown));
    });
  }
}
