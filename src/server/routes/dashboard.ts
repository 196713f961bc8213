import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { JobKind } from "../../store/jobs.js";
import { characterCount, keyLabel, keyLabelMaxChars, labelFits } from "../../store/key-rows.js";
import { idrToMicro, MAX_IDR, microToIdr } from "../../store/money.js";
import { type DeviceCodes, formatUserCode, normalizeUserCode } from "../auth/device-codes.js";
import {
  OwnerSessions,
  returnToCookieName,
  safeReturnPath,
  sessionCookieName,
  sessionTtlSeconds,
} from "../auth/owner-session.js";
import { quota } from "../billing/quota.js";
import type { Services } from "../compose/services.js";
import { paygSchema } from "../config/schema.js";
import { type DraftForm, type FormDraft, typedInto } from "../dashboard/form-draft.js";
import { currentSession, formField, sendPage, takeFormDraft } from "../dashboard/http.js";
import {
  approvalPage,
  approvedPage,
  dashboardPage,
  decisionRefusedPage,
  deniedPage,
  type FormRefusal,
  formatIdr,
  ownerLinkInvalidPage,
  requestNotFoundPage,
  requestPage,
  signedOutPage,
  tooManyWrongCodesPage,
  userCodeFormPage,
} from "../dashboard/pages.js";
import { byokView } from "../dispatch/byok-view.js";
import { GatewayError } from "../errors.js";
import type { AppEnv, Handler, OwnerSession } from "../http/context.js";
import { reachedOverTls } from "../http/request.js";
import { jobKinds } from "../jobs/job-kinds.js";
import { WindowCounter } from "../limits/window-counter.js";
import { isBuiltIn } from "../providers/registry.js";
import { addByok } from "./admin.js";
import { mintKey } from "./tool-keys.js";

/**
 * The owner's pages (access `owner-page` but for the login link and the script):
 *   GET  /dashboard/login?token=...&next=/dashboard/...
 *                                         one-time owner URL -> session cookie, 303 to `next`, else
 *                                         to the page that asked for a sign-in, else /dashboard
 *   GET  /dashboard                       balance, limits, usage charts, recent requests, keys, BYOK
 *   GET  /dashboard/device?user_code=...  the approval page (or a form asking for the code)
 *   POST /dashboard/device/approve|deny   form: user_code, csrf_token
 *   POST /dashboard/keys                  form: label, shared?, csrf_token (303; the next GET shows
 *                                         the new key, once)
 *   POST /dashboard/keys/:id/revoke       form: csrf_token
 *   POST /dashboard/byok                  form: provider, label?, key, csrf_token (303)
 *   POST /dashboard/byok/:id/remove       form: csrf_token (303)
 *   POST /dashboard/payg                  form: enabled?, limit_idr, csrf_token (303)
 *   GET  /dashboard/requests/:id          one request of the log
 *   POST /dashboard/logout                form: csrf_token; ends the session
 * A form posted without a session is not acted on (dashboard/http.ts): the sign-in leads back to
 * its page, and GET /dashboard fills it in again from its draft (dashboard/form-draft.ts).
 */

export const defaultDeviceCodeTtlSeconds = 600;
export const defaultDevicePollIntervalSeconds = 5;
/** Unknown, expired or used codes one owner session may enter per minute before a 429 page. */
const maxWrongCodesPerMinute = 10;
/** The dashboard's usage charts cover this many days, today included. */
const usageDays = 30;
const recentRequestCount = 20;
const recentJobCount = 10;
const allJobKinds = Object.keys(jobKinds) as JobKind[];
const dayMs = 86_400_000;
const flashTtlMs = 5 * 60_000;

interface Flash {
  notice?: string;
  newKey?: { label: string; value: string };
  at: number;
}

const utcDayStart = (ms: number) => ms - (ms % dayMs);

/**
 * Progressive enhancement only: the copy button (the key stays selectable text without it), and
 * a chart bar's value written under its chart on hover (its <title> shows it anyway; the table
 * of values per day has them all, for a keyboard and a screen reader).
 */
const dashboardScript = `for (const chart of document.querySelectorAll("figure.chart")) {
  const readout = chart.querySelector(".readout");
  chart.addEventListener("mouseover", (event) => {
    if (event.target.dataset && event.target.dataset.value) readout.textContent = event.target.dataset.value;
  });
}
for (const button of document.querySelectorAll("button[data-copy]")) {
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

export function dashboardHandlers(services: Services, devices: DeviceCodes) {
  const sessions = new OwnerSessions(services.repos.sessions);
  // Per owner session: a page (or a script holding the cookie) cannot walk the code space.
  const wrongCodes = new WindowCounter(60_000);

  /**
   * What the next GET /dashboard of a session shows once (post/redirect/get): a created key lives
   * here, in this process's memory only, until that one view or a few minutes pass.
   */
  const flashes = new Map<string, Flash>();
  const setFlash = (sessionId: string, flash: Omit<Flash, "at">) => {
    const now = services.options.now();
    for (const [id, f] of flashes) if (now - f.at > flashTtlMs) flashes.delete(id);
    flashes.set(sessionId, { ...flash, at: now });
  };
  const takeFlash = (sessionId: string): Omit<Flash, "at"> => {
    const flash = flashes.get(sessionId);
    flashes.delete(sessionId);
    if (!flash || services.options.now() - flash.at > flashTtlMs) return {};
    return { notice: flash.notice, newKey: flash.newKey };
  };

  const dashboardView = async (
    session: OwnerSession,
    extra: {
      notice?: string;
      newKey?: { label: string; value: string };
      draft?: FormDraft;
      refusal?: FormRefusal;
    } = {},
    status: 200 | 400 | 429 = 200,
  ) => {
    const account = services.store.getAccount(session.accountId);
    if (!account) throw new GatewayError(404, "not_found", "No such account.");
    const now = services.options.now();
    const since = utcDayStart(now) - (usageDays - 1) * dayMs;
    const [usageDaily, byModel, recent, accountQuota, keys, jobs] = await Promise.all([
      services.store.usageDaily(account.id, since),
      services.store.usageByModel(account.id, since),
      // The rows themselves: the list names the step of a route that served a request.
      services.store.requestLog(account.id, recentRequestCount),
      quota(services, account.id),
      services.store.listKeys(account.id),
      // A job's request is logged when the job ends: until then this is where it shows.
      services.repos.jobs.list(account.id, allJobKinds, { limit: recentJobCount, order: "desc" }),
    ]);
    const byDay = new Map(usageDaily.map((d) => [d.date, d]));
    const daily = Array.from({ length: usageDays }, (_, i) => {
      const date = new Date(since + i * dayMs).toISOString().slice(0, 10);
      const d = byDay.get(date);
      return { date, requests: d?.requests ?? 0, cost_idr: d?.cost_idr ?? 0 };
    });
    return dashboardPage(
      {
        accountId: account.id,
        csrfToken: session.csrfToken,
        quota: accountQuota,
        usage: {
          days: usageDays,
          daily,
          models: byModel.map((m) => ({
            model: m.model,
            requests: m.requests,
            cost_idr: microToIdr(m.cost_micro),
          })),
          recent,
        },
        keys,
        jobs: jobs?.jobs ?? [],
        byok: services.store.listByok(account.id).map(byokView),
        byokProviders: [...services.store.getCatalog().providers.values()]
          .filter((p) => !isBuiltIn(p))
          .map((p) => p.id),
        payg: {
          enabled: account.payg_enabled === 1,
          limit_idr: microToIdr(account.payg_limit_micro),
          window_seconds: account.payg_window_seconds,
        },
        ...extra,
      },
      status,
    );
  };
  /**
   * A form the owner must correct: the dashboard again, the form as it was typed (never a provider
   * key), saying what was wrong beside it and focusing the field to blame, if one is.
   */
  const refused = async (
    c: Context<AppEnv>,
    form: DraftForm,
    why: { field?: string; message: string },
    status: 400 | 429 = 400,
  ) =>
    sendPage(
      c,
      await dashboardView(
        c.get("owner"),
        { refusal: { typed: typedInto(form, c.get("form")), ...why } },
        status,
      ),
    );

  /** POST /dashboard/device/approve|deny. */
  const decide =
    (decision: "approve" | "deny"): Handler =>
    async (c) => {
      const session = c.get("owner");
      const now = services.options.now();
      if (wrongCodes.used(session.id, now) >= maxWrongCodesPerMinute)
        return sendPage(c, tooManyWrongCodesPage(maxWrongCodesPerMinute));
      const userCode = normalizeUserCode(formField(c.get("form"), "user_code") ?? "");
      const outcome = !userCode
        ? undefined
        : decision === "approve"
          ? await devices.approve(userCode, session.accountId, now)
          : await devices.deny(userCode, session.accountId, now);
      if (!userCode || !outcome?.ok) {
        wrongCodes.tryTake(session.id, Number.POSITIVE_INFINITY, now);
        return sendPage(
          c,
          decisionRefusedPage(outcome?.ok === false ? outcome.refusal : "unknown"),
        );
      }
      const shown = formatUserCode(userCode);
      return sendPage(c, decision === "approve" ? approvedPage(shown) : deniedPage(shown));
    };

  return {
    login: (async (c) => {
      const now = services.options.now();
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
          secure: reachedOverTls(c, services.options),
        });
        return c.redirect(returnTo, 303);
      }
      // A reused link in a browser that already holds a session is harmless: go on.
      if (await currentSession(c, sessions, now)) return c.redirect(returnTo, 303);
      return sendPage(c, ownerLinkInvalidPage());
    }) satisfies Handler,

    script: ((c: Context) =>
      c.body(dashboardScript, 200, {
        "content-type": "text/javascript; charset=utf-8",
        "cache-control": "no-cache",
        "x-content-type-options": "nosniff",
      })) satisfies Handler,

    home: (async (c) => {
      const session = c.get("owner");
      const draft = takeFormDraft(c);
      return sendPage(c, await dashboardView(session, { ...takeFlash(session.id), draft }));
    }) satisfies Handler,

    createKey: (async (c) => {
      const session = c.get("owner");
      // Counted as the API and the CLI count it: characters (code points), never cut.
      const typed = formField(c.get("form"), "label") ?? "";
      const parsed = keyLabel.safeParse(typed);
      if (!parsed.success) {
        const length = characterCount(typed.trim());
        return refused(c, "/dashboard/keys", {
          field: "label",
          message:
            length === 0
              ? "A key needs a label."
              : `A key's label can be at most ${keyLabelMaxChars} characters; this one has ${length}.`,
        });
      }
      const label = parsed.data;
      try {
        const created = await mintKey(services, {
          accountId: session.accountId,
          parentKeyId: null,
          label,
          shared: formField(c.get("form"), "shared") !== undefined,
          limiterId: `session:${session.id}`,
        });
        setFlash(session.id, { newKey: { label, value: created.key } });
        // Post/redirect/get: a reload shows the list, and neither posts again nor shows the key.
        return c.redirect("/dashboard", 303);
      } catch (err) {
        if (!(err instanceof GatewayError) || err.status !== 429) throw err;
        return refused(c, "/dashboard/keys", { message: err.message }, 429);
      }
    }) satisfies Handler,

    revokeKey: (async (c) => {
      const session = c.get("owner");
      const key = services.store.getKey(c.req.param("id") ?? "");
      if (key && key.account_id === session.accountId && !key.revoked_at) {
        await services.store.revokeKey(key.id, services.options.now());
        setFlash(session.id, { notice: `Key "${key.label}" revoked.` });
      }
      // Post/redirect/get: a reload of the list does not post the form again.
      return c.redirect("/dashboard", 303);
    }) satisfies Handler,

    addByok: (async (c) => {
      const session = c.get("owner");
      const form = c.get("form");
      const provider = formField(form, "provider") ?? "";
      const key = (formField(form, "key") ?? "").trim();
      // Counted as a key's label is, never cut: a cut could split an emoji in two.
      const label = (formField(form, "label") ?? "").trim();
      if (!key)
        return refused(c, "/dashboard/byok", {
          field: "key",
          message: "A provider key cannot be empty.",
        });
      if (!labelFits(label))
        return refused(c, "/dashboard/byok", {
          field: "label",
          message: `A provider key's label can be at most ${keyLabelMaxChars} characters; this one has ${characterCount(label)}.`,
        });
      try {
        const added = byokView(
          await addByok(services, session.accountId, {
            provider,
            key,
            ...(label ? { label } : {}),
          }),
        );
        setFlash(session.id, {
          notice: `Provider key "${added.label}" (${added.key_hint}) added for ${added.provider}.`,
        });
      } catch (err) {
        // The one refusal of addByok: a provider the gateway does not have, or takes no keys for.
        if (!(err instanceof GatewayError) || err.status !== 400) throw err;
        return refused(c, "/dashboard/byok", { field: "provider", message: err.message });
      }
      return c.redirect("/dashboard", 303);
    }) satisfies Handler,

    removeByok: (async (c) => {
      const session = c.get("owner");
      const id = c.req.param("id") ?? "";
      const found = services.store.listByok(session.accountId).find((b) => b.id === id);
      if (found && (await services.store.deleteByok(session.accountId, id))) {
        setFlash(session.id, { notice: `Provider key "${found.label}" removed.` });
      }
      return c.redirect("/dashboard", 303);
    }) satisfies Handler,

    payg: (async (c) => {
      const session = c.get("owner");
      const form = c.get("form");
      const raw = (formField(form, "limit_idr") ?? "").trim();
      const limit = raw === "" ? Number.NaN : Number(raw);
      const parsed = paygSchema.safeParse({
        enabled: formField(form, "enabled") !== undefined,
        limit_idr: limit,
      });
      if (!parsed.success) {
        // A number in range that is finer than a micro-IDR is told why (idr in config/schema.ts).
        const finer = parsed.error.issues.find((issue) => issue.code === "custom");
        return refused(c, "/dashboard/payg", {
          field: "limit_idr",
          message: finer
            ? `The PAYG limit ${finer.message}.`
            : `The PAYG limit must be a number of IDR from 0 to ${MAX_IDR.toLocaleString("en-US")}.`,
        });
      }
      const account = services.store.getAccount(session.accountId);
      await services.ledger.updateAccount(session.accountId, {
        payg_enabled: parsed.data.enabled ? 1 : 0,
        payg_limit_micro: idrToMicro(parsed.data.limit_idr),
        // The window stays what it was: the form sets the switch and the limit.
        payg_window_seconds: account?.payg_window_seconds ?? parsed.data.window_seconds,
      });
      setFlash(session.id, {
        notice: parsed.data.enabled
          ? `Pay as you go is on, limit ${formatIdr(parsed.data.limit_idr)}.`
          : "Pay as you go is off.",
      });
      return c.redirect("/dashboard", 303);
    }) satisfies Handler,

    request: (async (c) => {
      const session = c.get("owner");
      const row = await services.store.requestOf(session.accountId, c.req.param("id") ?? "");
      if (!row) return sendPage(c, requestNotFoundPage());
      const key = row.key_id ? services.store.getKey(row.key_id) : undefined;
      return sendPage(
        c,
        requestPage(
          { row, keyLabel: key?.label ?? null, provider: row.provider_id },
          session.csrfToken,
        ),
      );
    }) satisfies Handler,

    logout: (async (c) => {
      await sessions.end(c.get("owner"));
      deleteCookie(c, sessionCookieName, {
        path: "/",
        secure: reachedOverTls(c, services.options),
      });
      return sendPage(c, signedOutPage());
    }) satisfies Handler,

    device: (async (c) => {
      const session = c.get("owner");
      const raw = c.req.query("user_code");
      if (raw === undefined || raw.trim() === "")
        return sendPage(c, userCodeFormPage(session.csrfToken));
      const now = services.options.now();
      if (wrongCodes.used(session.id, now) >= maxWrongCodesPerMinute)
        return sendPage(c, tooManyWrongCodesPage(maxWrongCodesPerMinute));
      const userCode = normalizeUserCode(raw);
      const found = userCode ? await devices.open(userCode, session.accountId, now) : undefined;
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
    }) satisfies Handler,

    approve: decide("approve"),
    deny: decide("deny"),
  };
}
