import { cliCommand } from "../../cli-command.js";
import { type JobError, type JobRow, shownProgress } from "../../store/jobs.js";
import { shownKeyKind } from "../../store/key-rows.js";
import { microToIdr } from "../../store/money.js";
import type { KeyRow, RequestLogRow } from "../../store/types.js";
import { recentRequest } from "../../store/usage-rows.js";
import type { DecisionRefusal } from "../auth/device-codes.js";
import type { quota } from "../billing/quota.js";
import type { byokView } from "../dispatch/byok-view.js";
import { shownText } from "../http/shown-text.js";
import type { DraftForm, FormDraft } from "./form-draft.js";

/**
 * The dashboard's HTML: plain forms and inline SVG charts, readable in a text browser; the one
 * script (a copy button) is an enhancement. Every dynamic value goes through `escapeHtml`.
 */

export interface Page {
  status: 200 | 400 | 401 | 403 | 404 | 429;
  html: string;
}

export function escapeHtml(value: string): string {
  return value
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

const styles = `
  body { font-family: system-ui, sans-serif; max-width: 44rem; margin: 3rem auto; padding: 0 1rem;
         color: #1b1b1b; line-height: 1.5; }
  h1 { font-size: 1.4rem; }
  .code { font: 700 2.6rem/1.2 ui-monospace, monospace; letter-spacing: .2em; padding: .6rem 1rem;
          border: 2px solid #1b1b1b; border-radius: .4rem; display: inline-block; margin: .5rem 0; }
  /* A name someone else chose (a CLI's client name) wraps rather than widening the page. */
  bdi { overflow-wrap: anywhere; }
  /* A key's label (up to 100 characters, maybe one unbroken word) wraps inside its cell. */
  td.label { overflow-wrap: anywhere; min-width: 8rem; }
  .notice, .new-key p { overflow-wrap: anywhere; }
  /* An address someone typed may be one long word. */
  code.path { overflow-wrap: anywhere; }
  button.danger bdi { display: inline-block; max-width: 12rem; overflow: hidden; text-overflow: ellipsis;
                      white-space: nowrap; vertical-align: bottom; }
  .key { font: 1rem ui-monospace, monospace; padding: .5rem; background: #f3f3f3; word-break: break-all; }
  form.inline { display: inline; }
  button { font-size: 1rem; padding: .5rem 1.4rem; margin-right: .6rem; border-radius: .3rem;
           border: 1px solid #1b1b1b; background: #fff; cursor: pointer; }
  button.primary { background: #1b5e20; border-color: #1b5e20; color: #fff; }
  table { border-collapse: collapse; width: 100%; font-size: .9rem; }
  th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #ddd; }
  th { white-space: nowrap; }
  .muted { color: #666; }
  body.wide { max-width: 64rem; margin-top: 1.5rem; }
  header.top { display: flex; flex-wrap: wrap; justify-content: space-between; align-items: baseline; gap: .5rem; }
  header.top h1 { margin: 0; }
  h2 { font-size: 1.15rem; margin: 2rem 0 .6rem; }
  h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(13rem, 1fr)); gap: .8rem; margin-top: 1.2rem; }
  .card { border: 1px solid #ddd; border-radius: .5rem; padding: .7rem .9rem; }
  .card h3 { margin: 0; font-size: .85rem; font-weight: 600; color: #555; text-transform: uppercase; letter-spacing: .03em; }
  .card .big { font-size: 1.4rem; font-weight: 650; margin: .2rem 0; }
  .card .big small { font-size: .85rem; font-weight: 400; color: #555; }
  .card p { margin: .2rem 0; }
  .bar { height: .5rem; background: #eee; border-radius: .25rem; overflow: hidden; min-width: 3rem; }
  .bar span { display: block; height: 100%; background: #2e7d32; }
  .bar.high span { background: #f9a825; }
  .bar.full span { background: #c62828; }
  .bar.share span { background: #1565c0; }
  .charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(18rem, 1fr)); gap: 1rem; }
  figure.chart { margin: 0; }
  figure.chart figcaption { font-size: .9rem; margin-bottom: .3rem; }
  figure.chart svg { display: block; width: 100%; height: 7rem; background: #fafafa; border-bottom: 1px solid #999; }
  figure.chart rect.v { fill: #1565c0; }
  figure.chart rect.z { fill: #ddd; }
  figure.chart .axis { display: flex; justify-content: space-between; font-size: .75rem; color: #666; }
  figure.chart .plot { display: grid; grid-template-columns: auto minmax(0, 1fr); gap: .3rem; }
  figure.chart .scale { display: flex; flex-direction: column; justify-content: space-between;
                        font-size: .7rem; color: #666; text-align: right; white-space: nowrap; }
  figure.chart rect:hover { fill: #f9a825; }
  figure.chart .readout { font-size: .85rem; min-height: 1.3em; margin: .2rem 0 0; }
  details.values summary { cursor: pointer; color: #555; margin-top: .6rem; }
  nav.top { display: flex; gap: .8rem; align-items: baseline; flex-wrap: wrap; }
  button.link { background: none; border: none; padding: 0; margin: 0; color: #0645ad;
                text-decoration: underline; font: inherit; cursor: pointer; }
  td.req { max-width: 0; width: 100%; }
  td.req .name { display: block; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  td.req .name code { white-space: nowrap; }
  /* The time and the endpoint break apart on a phone, never inside either. */
  td.req .sub { overflow: hidden; text-overflow: ellipsis; }
  td.req .job { overflow-wrap: anywhere; }
  /* A route's step, maybe as long as the route's name: one line, its whole name in its title. */
  td.req .served { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  td.progress { white-space: nowrap; width: 9rem; }
  td.progress progress { width: 5rem; vertical-align: middle; accent-color: #1565c0; }
  td.status { white-space: nowrap; }
  .narrow-only { display: none; }
  .nw { white-space: nowrap; }
  table code { white-space: nowrap; }
  dl.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .3rem 1rem; }
  dl.facts dt { color: #555; }
  dl.facts dd { margin: 0; overflow-wrap: anywhere; }
  form.create select, form.create input { font-size: 1rem; padding: .35rem; max-width: 100%; }
  section.settings { border: 1px solid #ddd; border-radius: .5rem; padding: .2rem .9rem .9rem; }
  .scroll { overflow-x: auto; }
  td.num, th.num { text-align: right; white-space: nowrap; }
  td.share, th.share { width: 30%; min-width: 4rem; }
  td.when { white-space: nowrap; }
  .small { font-size: .8rem; }
  .pill { display: inline-block; padding: 0 .4rem; border-radius: .6rem; font-size: .8rem; white-space: nowrap; }
  .pill.ok { background: #e8f5e9; color: #1b5e20; }
  .pill.bad { background: #ffebee; color: #b71c1c; }
  .pill.run { background: #e3f2fd; color: #0d47a1; }
  .pill.cut { background: #fff3e0; color: #8a4b00; }
  .pill.gone { background: #eeeeee; color: #424242; }
  dl.legend { font-size: .85rem; margin: .4rem 0 0; }
  .refusal { border-left: .25rem solid #b71c1c; }
  /* The label's cell takes what is left: a refused key's keeps room for why, which wraps. */
  td.refused-key { min-width: 14rem; }
  .refused { color: #b71c1c; margin-top: .2rem; }
  details.confirm summary { cursor: pointer; color: #b71c1c; white-space: nowrap; }
  details.confirm p { margin: .3rem 0; font-size: .85rem; }
  button.danger { background: #b71c1c; border-color: #b71c1c; color: #fff; margin: 0; }
  details#revoked-keys { margin-top: .6rem; }
  details#revoked-keys summary { cursor: pointer; color: #555; }
  form.create { display: flex; flex-wrap: wrap; gap: .6rem; align-items: center; margin-top: 1rem; }
  .new-key { border: 2px solid #1b5e20; border-radius: .5rem; padding: .4rem .9rem .9rem; margin-top: 1rem; }
  .notice { background: #fff8e1; padding: .5rem .8rem; border-radius: .3rem; }
  @media (max-width: 40rem) {
    body { margin-top: 1rem; }
    .wide-only { display: none; }
    .narrow-only { display: revert; }
    td.when { white-space: normal; }
    .cards { grid-template-columns: repeat(2, minmax(0, 1fr)); gap: .5rem; }
    .card { padding: .5rem .6rem; }
    /* An amount breaks only at its spaces ("Rp" / "993,456,788.67"), never inside its digits. */
    .card .big { font-size: 1.1rem; }
    .card p { font-size: .85rem; }
    th, td { padding: .3rem .3rem; }
    button { padding: .5rem 1rem; }
    /* The row names the key already; the button's name (aria-label) still says which. */
    button.danger bdi { display: none; }
    td.refused-key { min-width: 0; }
    td.progress { width: auto; }
    td.progress progress { width: 3.5rem; }
  }
  pre.cmd { font: 1rem ui-monospace, monospace; padding: .6rem .8rem; background: #f3f3f3;
            border-radius: .3rem; overflow-x: auto; }
`;

/** Served by the gateway itself, so the CSP's `script-src 'self'` covers it: the copy button. */
export const dashboardScriptPath = "/dashboard/assets/dashboard.js";

function layout(title: string, body: string, csrfToken?: string, wide = false): string {
  const csrfMeta = csrfToken ? `\n<meta name="csrf-token" content="${escapeHtml(csrfToken)}">` : "";
  const script = wide ? `\n<script src="${dashboardScriptPath}" defer></script>` : "";
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">${csrfMeta}
<title>${escapeHtml(title)} - Model Gateway</title>
<style>${styles}</style>${script}
</head>
<body${wide ? ' class="wide"' : ""}>
<main>
${body}
</main>
</body>
</html>
`;
}

function page(status: Page["status"], title: string, body: string, csrfToken?: string): Page {
  return { status, html: layout(title, `<h1>${escapeHtml(title)}</h1>\n${body}`, csrfToken) };
}

/**
 * A page for the signed-in owner outside the dashboard itself (the login code's form and the
 * approval): its title beside the dashboard's navigation, so there is a way back. No script: an
 * approval page runs none. The pages after a decision (or a refused code) link back instead and
 * carry no form at all, not even the navigation's sign-out.
 */
function ownerPage(
  status: Page["status"],
  title: string,
  body: string,
  csrfToken: string,
  current?: NavTarget,
): Page {
  return {
    status,
    html: layout(
      title,
      `<header class="top"><h1>${escapeHtml(title)}</h1>\n${topNav(csrfToken, current)}</header>\n${body}`,
      csrfToken,
    ),
  };
}

const ownerLinkHelp =
  () => `<p>On the machine where <code>gateway serve</code> runs, open the dashboard signed in:</p>
<pre class="cmd">${escapeHtml(cliCommand("dashboard"))}</pre>
<p class="muted">It opens a fresh one-time owner link in the browser and prints it (add
<code>--db FILE</code> if the server runs on another database than <code>./gateway.db</code>).
Elsewhere, run <code>${escapeHtml(cliCommand("owner-link"))}</code> there and open the URL it prints in this browser.</p>`;

/**
 * `returnTo`: the page the owner will be sent back to after signing in, if any. `form`: the page
 * answers a form posted without a session; `draft`, what was typed into it, comes back after.
 */
export function signInNeededPage(returnTo?: string, form?: { draft?: FormDraft }): Page {
  const here = form ? "the form's page" : "this page";
  const back = returnTo
    ? `<p>After signing in you come back to ${here} (<code>${escapeHtml(returnTo)}</code>).</p>`
    : "";
  const notSent = form
    ? `<p class="notice" role="status"><strong>The form was not sent</strong>: this browser's session had ended, so nothing changed.${
        form.draft
          ? ` What you typed is kept in this browser and fills the form in again after you sign in${
              form.draft.form === "/dashboard/byok"
                ? ", but for the provider key: it is never kept"
                : ""
            }.`
          : ""
      }</p>\n`
    : "";
  return page(
    401,
    "Sign in to the gateway dashboard",
    `${notSent}<p>${form ? "Sending a form" : "This page"} needs the owner's dashboard session, and this browser has none.</p>
${ownerLinkHelp()}
${back}`,
  );
}

export function ownerLinkInvalidPage(): Page {
  return page(
    401,
    "This owner link does not work",
    `<p>The link was already used, or it is not a link printed by this gateway. Each owner URL works once.</p>
${ownerLinkHelp()}`,
  );
}

export function forbiddenPage(reason: string): Page {
  return page(403, "Request refused", `<p>${escapeHtml(reason)}</p>`);
}

export function userCodeFormPage(csrfToken: string): Page {
  return ownerPage(
    200,
    "Approve a gateway login",
    `<p>Enter the code that <code>gateway login</code> shows in your terminal.</p>
<form method="get" action="/dashboard/device">
  <label>Code <input name="user_code" autocomplete="off" placeholder="XXXX-XXXX" size="12"></label>
  <button type="submit">Continue</button>
</form>`,
    csrfToken,
    "/dashboard/device",
  );
}

export function approvalPage(input: {
  userCode: string;
  clientName: string;
  accountId: string;
  expiresInSeconds: number;
  csrfToken: string;
}): Page {
  const hidden = `<input type="hidden" name="user_code" value="${escapeHtml(input.userCode)}">
    <input type="hidden" name="csrf_token" value="${escapeHtml(input.csrfToken)}">`;
  // Rows written before names were cleaned at issue are cleaned here too; <bdi> isolates the rest.
  const client = input.clientName
    ? ` from <strong><bdi>${escapeHtml(shownText(input.clientName))}</bdi></strong>`
    : "";
  const minutes = Math.max(1, Math.round(input.expiresInSeconds / 60));
  return ownerPage(
    200,
    "Approve a gateway login",
    `<p>A command-line login${client} asks for a login key for account
<strong>${escapeHtml(input.accountId)}</strong>. The code it showed must be:</p>
<p class="code" id="user-code">${escapeHtml(input.userCode)}</p>
<p><strong>Check that this code matches the one in your terminal.</strong>
If it does not, or you did not run <code>gateway login</code>, choose Deny.</p>
<p class="muted">This request expires in about ${minutes} minute${minutes === 1 ? "" : "s"}.</p>
<form class="inline" method="post" action="/dashboard/device/approve">
    ${hidden}
    <button class="primary" type="submit">Approve</button>
</form>
<form class="inline" method="post" action="/dashboard/device/deny">
    ${hidden}
    <button type="submit">Deny</button>
</form>`,
    input.csrfToken,
    "/dashboard/device",
  );
}

const decisionLinks = `<p><a href="/dashboard/device">Enter another code</a> ·
<a href="/dashboard">Go to the dashboard</a></p>`;

export function decisionRefusedPage(refusal: DecisionRefusal): Page {
  const [status, title, text]: [Page["status"], string, string] = {
    unknown: [
      404,
      "Unknown code",
      `No login request has this code. Check the code in your terminal, or run <code>${escapeHtml(cliCommand("login"))}</code> again.`,
    ],
    expired: [
      400,
      "This code has expired",
      `The login request timed out before it was approved. Run <code>${escapeHtml(cliCommand("login"))}</code> again.`,
    ],
    used: [
      400,
      "This code was already used",
      `This login request was already approved or denied. Run <code>${escapeHtml(cliCommand("login"))}</code> again if needed.`,
    ],
    cancelled: [
      400,
      "This login was cancelled",
      `The terminal that asked for this login stopped waiting (Ctrl-C, or it went away), so it cannot be approved. Run <code>${escapeHtml(cliCommand("login"))}</code> again.`,
    ],
  }[refusal] as [Page["status"], string, string];
  return page(status, title, `<p>${text}</p>\n${decisionLinks}`);
}

export function unreadableFormPage(): Page {
  return page(
    400,
    "The form could not be read",
    "<p>The form's data is malformed. Reload the page and submit the form again.</p>",
  );
}

export function tooManyWrongCodesPage(perMinute: number): Page {
  return page(
    429,
    "Too many wrong codes",
    `<p>This session entered more than ${perMinute} unknown codes in a minute. Wait a minute, then
enter the code exactly as <code>gateway login</code> shows it.</p>
${decisionLinks}`,
  );
}

export function approvedPage(userCode: string): Page {
  return page(
    200,
    "Login approved",
    `<p>Code <strong>${escapeHtml(userCode)}</strong> is approved. You can close this tab and go back to
the terminal; <code>gateway login</code> finishes on its own.</p>
<p><a href="/dashboard">Go to the dashboard</a></p>`,
  );
}

export function deniedPage(userCode: string): Page {
  return page(
    200,
    "Login denied",
    `<p>Code <strong>${escapeHtml(userCode)}</strong> was denied; no key was created.</p>
<p><a href="/dashboard">Go to the dashboard</a></p>`,
  );
}

function time(ms: number | null): string {
  return ms === null ? "-" : new Date(ms).toISOString().replace("T", " ").slice(0, 16);
}

const utc = (iso: string) => `${iso.replace("T", " ").slice(0, 16)} UTC`;
const count = (n: number) => new Intl.NumberFormat("en-US").format(n);

/**
 * Display only: amounts under 10 IDR keep every micro-IDR (six decimals, the smallest amount the
 * gateway stores), so a cheap request reads what it cost, never 0.
 */
export function formatIdr(idr: number): string {
  const digits = idr !== 0 && Math.abs(idr) < 10 ? 6 : 2;
  return `Rp ${new Intl.NumberFormat("en-US", { maximumFractionDigits: digits }).format(idr)}`;
}

export type DashboardQuota = Awaited<ReturnType<typeof quota>>;

export interface DashboardUsage {
  days: number;
  /** One entry per day of the period, oldest first, days without requests included. */
  daily: { date: string; requests: number; cost_idr: number }[];
  models: { model: string; requests: number; cost_idr: number }[];
  /** The newest requests of the log, newest first. */
  recent: RequestLogRow[];
}

export type DashboardByok = ReturnType<typeof byokView>;

export interface DashboardView {
  accountId: string;
  csrfToken: string;
  quota: DashboardQuota;
  usage: DashboardUsage;
  keys: KeyRow[];
  /** The newest jobs, newest first. */
  jobs: JobRow[];
  byok: DashboardByok[];
  /** Providers a BYOK key can be added for. */
  byokProviders: string[];
  /** The account's PAYG settings, also while it is off. */
  payg: { enabled: boolean; limit_idr: number; window_seconds: number };
  notice?: string;
  newKey?: { label: string; value: string };
  /** A form sent while signed out, to fill in again. */
  draft?: FormDraft;
  /** A form the gateway refused: shown again as it was typed, saying what to correct. */
  refusal?: FormRefusal;
}

export interface FormRefusal {
  /** The form and what was typed into it (never a provider key). */
  typed: FormDraft;
  /** The field to correct, if one is to blame. */
  field?: string;
  message: string;
}

/** A share as a bar; the width is a number this code computed, never user input. */
function bar(used: number, limit: number): string {
  const pct = limit > 0 ? Math.min(100, Math.round((used / limit) * 100)) : 0;
  const level = pct >= 90 ? " full" : pct >= 70 ? " high" : "";
  return `<div class="bar${level}"><span style="width:${pct}%"></span></div>`;
}

/** A part of a whole, not a limit: one colour whatever its size. */
function shareBar(part: number, whole: number): string {
  const pct = whole > 0 ? Math.round((part / whole) * 100) : 0;
  return `<div class="bar share"><span style="width:${pct}%"></span></div>`;
}

function card(title: string, value: string, detail = ""): string {
  return `<section class="card"><h3>${escapeHtml(title)}</h3><p class="big">${value}</p>${detail}</section>`;
}

function quotaCards(q: DashboardQuota): string {
  const cards = [
    card(
      "Balance",
      `<span id="balance">${escapeHtml(formatIdr(q.balance_idr))}</span>`,
      `<p class="muted">tier ${escapeHtml(q.tier)}</p>`,
    ),
    card(
      "Held",
      `<span id="held">${escapeHtml(formatIdr(q.held_idr))}</span>`,
      '<p class="muted">by requests and jobs in flight</p>',
    ),
    q.payg
      ? card(
          "Pay as you go",
          `<span id="payg-spent">${escapeHtml(formatIdr(q.payg.spent_idr))}</span> <small>of ${escapeHtml(formatIdr(q.payg.limit_idr))}</small>`,
          `${bar(q.payg.spent_idr, q.payg.limit_idr)}<p class="muted">resets ${escapeHtml(utc(q.payg.resets_at))}</p>`,
        )
      : card("Pay as you go", "off", '<p class="muted">not enabled for this account</p>'),
    card(
      "Free today",
      `<span id="free-left">${count(q.free.daily_remaining)}</span> <small>of ${count(q.free.daily_limit)} left</small>`,
      `${bar(q.free.daily_used, q.free.daily_limit)}<p class="muted">resets ${escapeHtml(utc(q.free.resets_at))}</p>`,
    ),
  ];
  for (const w of q.subscription?.windows ?? []) {
    cards.push(
      card(
        `${q.subscription!.plan}: ${w.name}`,
        `${count(w.remaining)} <small>of ${count(w.quota)} left</small>`,
        `${bar(w.used, w.quota)}<p class="muted">resets ${escapeHtml(utc(w.resets_at))}</p>`,
      ),
    );
  }
  return `<div class="cards">${cards.join("\n")}</div>`;
}

/**
 * A bar chart as inline SVG: no inline script, so the page's CSP stays as strict as it is. The
 * scale's top and bottom are printed beside it; each bar carries a <title>, which browsers show
 * on hover, and the page's script also writes the hovered bar's value under the chart. The bars
 * are not tab stops (a keyboard would cross every day of both charts to get past them): the chart
 * is one image named by its summary, and each day's values are in the table that follows.
 */
function barChart(
  id: string,
  label: string,
  points: { label: string; value: number; shown: string }[],
  zero: string,
  total: string,
): string {
  const max = Math.max(0, ...points.map((p) => p.value));
  const height = 100;
  const step = 10;
  const bars = points
    .map((p, i) => {
      const h = max > 0 ? Math.max(p.value > 0 ? 1.5 : 0, (p.value / max) * height) : 0;
      const text = `${p.label}: ${p.shown}`;
      return `<rect class="${p.value > 0 ? "v" : "z"}" x="${i * step + 1}" y="${(height - Math.max(h, 0.6)).toFixed(2)}" width="${step - 2}" height="${Math.max(h, 0.6).toFixed(2)}" data-value="${escapeHtml(text)}"><title>${escapeHtml(text)}</title></rect>`;
    })
    .join("");
  const peak = points.reduce((a, p) => (p.value > a.value ? p : a), points[0]);
  const first = points[0]?.label ?? "";
  const last = points[points.length - 1]?.label ?? "";
  const summary = `${label}, last ${points.length} days: ${total}${max > 0 ? `, peak ${peak.shown} on ${peak.label}` : ""}. Each day's values are in the table ${valuesTitle}.`;
  return `<figure class="chart" id="${id}">
<figcaption>${escapeHtml(label)} <span class="muted">(peak ${max > 0 ? `<span class="nw">${escapeHtml(peak.shown)}</span> on <span class="nw">${escapeHtml(peak.label)}</span>` : "none"})</span></figcaption>
<div class="plot"><div class="scale" aria-hidden="true"><span>${escapeHtml(max > 0 ? peak.shown : zero)}</span><span>${escapeHtml(zero)}</span></div>
<svg viewBox="0 0 ${points.length * step} ${height}" preserveAspectRatio="none" role="img" aria-label="${escapeHtml(summary)}">${bars}</svg>
<span></span><div class="axis"><span>${escapeHtml(first)}</span><span>${escapeHtml(last)}</span></div></div>
<p class="readout muted" aria-live="polite"></p>
</figure>`;
}

const valuesTitle = "Values per day";

/** The charts' numbers as text: the days with requests, newest first. */
function dailyValues(daily: DashboardUsage["daily"]): string {
  const rows = daily
    .filter((d) => d.requests > 0)
    .reverse()
    .map(
      (d) =>
        `<tr><td>${escapeHtml(d.date)}</td><td class="num">${count(d.requests)}</td><td class="num">${escapeHtml(formatIdr(d.cost_idr))}</td></tr>`,
    )
    .join("\n");
  return `<details class="values" id="daily-values"><summary>${valuesTitle}</summary>
<div class="scroll"><table>
<thead><tr><th>Date (UTC)</th><th class="num">Requests</th><th class="num">Spend</th></tr></thead>
<tbody>
${rows || '<tr><td colspan="3" class="muted">No requests in this period.</td></tr>'}
</tbody></table></div></details>`;
}

function usageSection(u: DashboardUsage): string {
  const spent = u.daily.reduce((a, d) => a + d.cost_idr, 0);
  const requests = u.daily.reduce((a, d) => a + d.requests, 0);
  const maxModel = Math.max(0, ...u.models.map((m) => m.cost_idr));
  const maxModelRequests = Math.max(0, ...u.models.map((m) => m.requests));
  const models = u.models
    .map(
      (
        m,
      ) => `<tr><td class="req"><span class="name" title="${escapeHtml(m.model)}"><code>${escapeHtml(m.model)}</code></span></td><td class="num wide-only">${count(m.requests)}</td>
<td class="num">${escapeHtml(formatIdr(m.cost_idr))}<div class="muted small narrow-only">${count(m.requests)} request${m.requests === 1 ? "" : "s"}</div></td><td class="share">${maxModel > 0 ? shareBar(m.cost_idr, maxModel) : shareBar(m.requests, maxModelRequests)}</td></tr>`,
    )
    .join("\n");
  return `<h2>Usage, last ${u.days} days</h2>
<p id="usage-total"><strong>${count(requests)}</strong> requests, <strong>${escapeHtml(formatIdr(spent))}</strong> spent.</p>
<div class="charts">
${barChart(
  "chart-spend",
  "Spend per day (IDR)",
  u.daily.map((d) => ({ label: d.date, value: d.cost_idr, shown: formatIdr(d.cost_idr) })),
  formatIdr(0),
  `${formatIdr(spent)} in all`,
)}
${barChart(
  "chart-requests",
  "Requests per day",
  u.daily.map((d) => ({
    label: d.date,
    value: d.requests,
    shown: `${count(d.requests)} request${d.requests === 1 ? "" : "s"}`,
  })),
  "0",
  `${count(requests)} request${requests === 1 ? "" : "s"} in all`,
)}
</div>
${dailyValues(u.daily)}
<h3>Per model</h3>
<div class="scroll"><table id="per-model">
<thead><tr><th>Model</th><th class="num wide-only">Requests</th><th class="num">Spend</th><th class="share">Share</th></tr></thead>
<tbody>
${models || '<tr><td colspan="4" class="muted">No requests in this period.</td></tr>'}
</tbody></table></div>`;
}

interface Outcome {
  /** The pill's look: answered, still running, cut short, left by its client, or failed. */
  pill: "ok" | "run" | "cut" | "gone" | "bad";
  /** The word under the pill in the list (the error code, or the state), if any. */
  word: string | null;
  /** What it means to the owner: the pill's title, the request page's explanation. */
  meaning: string;
}

const meanings = {
  ok: "Answered, and charged what its Cost says.",
  run: "Still running: the most it can cost is held (the Held card) until it ends.",
  cut: "A stream cut short because the gateway stopped while it ran (a crash or a kill): charged from its last delivery mark, at least what reached the client and never more than was held.",
  gone: "The client closed the connection before the answer: nothing charged.",
  bad: "Failed, with the error code the client got: nothing charged.",
};

/** What became of a request, in the owner's words. */
function outcomeOf(r: {
  state: string;
  status: number | null;
  error_code: string | null;
}): Outcome {
  if (r.state === "reserved") return { pill: "run", word: null, meaning: meanings.run };
  if (r.state === "interrupted") return { pill: "cut", word: "interrupted", meaning: meanings.cut };
  if (r.state === "settled" && r.status !== null && r.status < 400)
    return { pill: "ok", word: null, meaning: meanings.ok };
  if (r.error_code === "client_closed")
    return { pill: "gone", word: r.error_code, meaning: meanings.gone };
  return { pill: "bad", word: r.error_code, meaning: meanings.bad };
}

function statusPill(r: { state: string; status: number | null }, o: Outcome): string {
  const text = r.state === "reserved" ? "in flight" : String(r.status ?? "-");
  return `<span class="pill ${o.pill}" title="${escapeHtml(o.meaning)}">${escapeHtml(text)}</span>`;
}

/** The list's status cell: the pill, and under it the error code or the state it ended in. */
function statusCell(r: {
  state: string;
  status: number | null;
  error_code: string | null;
}): string {
  const o = outcomeOf(r);
  const word = o.word ? `<div class="muted small">${escapeHtml(o.word)}</div>` : "";
  return `${statusPill(r, o)}${word}`;
}

/** How a request was paid, in the list's words; the balance, the usual way, goes unsaid. */
const paymentWords: Record<string, string> = {
  byok: "own key",
  free: "free",
  subscription: "subscription",
  payg: "pay as you go",
};

/** Under a cost: how it was paid, where that is not the balance (a failed request paid nothing). */
function paymentNote(r: { state: string; payment: string }): string {
  const word = r.state === "failed" ? undefined : paymentWords[r.payment];
  return word ? `<div class="muted small">${escapeHtml(word)}</div>` : "";
}

/** The recent list's legend: what each status, and each word under a status or a cost, means. */
function statusLegend(): string {
  const pill = (look: Outcome["pill"], text: string) => `<span class="pill ${look}">${text}</span>`;
  const entries: [string, string][] = [
    [pill("ok", "200"), meanings.ok],
    [pill("run", "in flight"), meanings.run],
    [`${pill("cut", "200")} interrupted`, meanings.cut],
    [`${pill("gone", "499")} client_closed`, meanings.gone],
    [
      `${pill("bad", "4xx, 5xx")} and its code`,
      `${meanings.bad} For example upstream_error: the provider failed or refused it.`,
    ],
    ["own key", "Served with your own provider key (BYOK): it costs nothing here."],
    ["free", "A free model's request, counted in the free allowance (Free today), not charged."],
    ["subscription", "Counted in a subscription window, not charged."],
    ["pay as you go", "Charged to pay as you go, not to the balance."],
  ];
  return `<details class="values" id="status-legend"><summary>What the statuses and costs mean</summary>
<dl class="facts legend">
${entries.map(([term, meaning]) => `<dt>${term}</dt><dd>${escapeHtml(meaning)}</dd>`).join("\n")}
</dl></details>`;
}

/** The model that served a request where it is not the one asked for: a route's step. */
function servedStep(r: { model: string | null; served_model: string | null }): string | undefined {
  return r.served_model !== null && r.served_model !== r.model ? r.served_model : undefined;
}

const requestPath = (id: string) => `/dashboard/requests/${encodeURIComponent(id)}`;

/**
 * On a phone the table keeps three columns (request, status, cost): the time moves under the
 * model, and a model name too long for the column ends in an ellipsis rather than breaking.
 */
function recentSection(recent: DashboardUsage["recent"], keyLabels: Map<string, string>): string {
  const rows = recent
    .map((row) => {
      const r = recentRequest(row);
      const served = servedStep(row);
      const when = `${r.created_at.slice(5, 10)} ${r.created_at.slice(11, 16)}`;
      const model = r.model ?? "-";
      return `<tr id="request-${escapeHtml(r.id)}"><td class="when wide-only">${escapeHtml(when)}</td>
<td class="req"><a class="name" href="${escapeHtml(requestPath(r.id))}" title="${escapeHtml(model)}"><code>${escapeHtml(model)}</code></a>${served ? `<div class="muted small served" title="served by ${escapeHtml(served)}">served by <code>${escapeHtml(served)}</code></div>` : ""}<div class="muted small sub"><span class="narrow-only"><span class="nw">${escapeHtml(when)} ·</span> </span><span class="nw">${escapeHtml(r.endpoint)}${r.via === "mcp" ? " · via MCP" : ""}</span></div>${r.job_id ? `<div class="muted small job">job <code>${escapeHtml(r.job_id)}</code></div>` : ""}</td>
<td class="status">${statusCell(r)}</td><td class="num wide-only">${count(r.input_tokens)} / ${count(r.output_tokens)}</td><td class="num">${escapeHtml(formatIdr(r.cost_idr))}${paymentNote(r)}</td>
<td class="wide-only">${escapeHtml((r.key_id && keyLabels.get(r.key_id)) || "-")}</td></tr>`;
    })
    .join("\n");
  return `<h2>Recent requests</h2>
<p class="muted small">Open a request for its details.</p>
<div class="scroll"><table id="recent">
<thead><tr><th class="wide-only">Time (UTC)</th><th>Model</th><th>Status</th><th class="num wide-only">Tokens in / out</th><th class="num">Cost</th><th class="wide-only">Key</th></tr></thead>
<tbody>
${rows || '<tr><td colspan="6" class="muted">No requests yet.</td></tr>'}
</tbody></table></div>
${statusLegend()}`;
}

const jobPills: Record<JobRow["status"], Outcome["pill"]> = {
  queued: "run",
  running: "run",
  completed: "ok",
  failed: "bad",
};

/**
 * The newest jobs with how far each got: a job's request joins the recent requests only when the
 * job ends, so a job in flight shows here (its hold is in the Held card). A finished job's model
 * opens its request. On a phone the kind and time move under the model, as a request's do.
 */
function jobsSection(jobs: JobRow[]): string {
  if (jobs.length === 0) return "";
  const rows = jobs
    .map((job) => {
      const iso = new Date(job.created_at).toISOString();
      const when = `${iso.slice(5, 10)} ${iso.slice(11, 16)}`;
      const model = `<code>${escapeHtml(job.model)}</code>`;
      const finished = job.status === "completed" || job.status === "failed";
      const name =
        finished && job.request_id
          ? `<a class="name" href="${escapeHtml(requestPath(job.request_id))}" title="${escapeHtml(job.model)}">${model}</a>`
          : `<span class="name" title="${escapeHtml(job.model)}">${model}</span>`;
      const code =
        job.status === "failed" && job.error ? (JSON.parse(job.error) as JobError).code : "";
      const percent = shownProgress(job);
      const progress =
        job.status === "failed"
          ? '<span class="muted">-</span>'
          : `<progress max="100" value="${percent}" aria-label="${escapeHtml(job.id)}: ${percent}% done"></progress> <span class="percent">${percent}%</span>`;
      return `<tr id="job-${escapeHtml(job.id)}"><td class="when wide-only">${escapeHtml(when)}</td>
<td class="req">${name}<div class="muted small sub"><span class="narrow-only"><span class="nw">${escapeHtml(when)} ·</span> </span><span class="nw">${escapeHtml(job.kind.replace("_", " "))}</span></div><div class="muted small job"><code>${escapeHtml(job.id)}</code></div></td>
<td class="status"><span class="pill ${jobPills[job.status]}">${escapeHtml(job.status)}</span>${code ? `<div class="muted small">${escapeHtml(code)}</div>` : ""}</td>
<td class="progress">${progress}</td></tr>`;
    })
    .join("\n");
  return `<h2 id="jobs-title">Jobs</h2>
<p class="muted small">Music and video, newest first. A job's request joins the recent requests, with its cost, when the job ends.</p>
<div class="scroll"><table id="jobs" aria-labelledby="jobs-title">
<thead><tr><th class="wide-only">Time (UTC)</th><th>Model</th><th>Status</th><th>Progress</th></tr></thead>
<tbody>
${rows}
</tbody></table></div>`;
}

/** A key's kind as the owner knows it (`shownKeyKind`), with the login that made a per-tool key. */
function kindOf(key: KeyRow): string {
  const kind = escapeHtml(shownKeyKind(key));
  if (key.parent_key_id === null) return kind;
  return `<span title="made by the CLI of login key ${escapeHtml(key.parent_key_id)}">${kind}</span>`;
}

function keyRow(key: KeyRow, csrfToken: string): string {
  const action = key.revoked_at
    ? `revoked ${time(key.revoked_at)}`
    : `<details class="confirm"><summary>Revoke</summary>
<form method="post" action="/dashboard/keys/${encodeURIComponent(key.id)}/revoke">
<input type="hidden" name="csrf_token" value="${escapeHtml(csrfToken)}">
<p>Requests with this key will get 401 at once.</p>
<button class="danger" type="submit" aria-label="Revoke ${escapeHtml(key.label)}">Revoke <bdi>${escapeHtml(key.label)}</bdi></button></form></details>`;
  return `<tr id="key-${escapeHtml(key.id)}"><td class="label"><strong><bdi>${escapeHtml(key.label)}</bdi></strong>
<div class="muted small"><code>${escapeHtml(key.id)}</code> · ${kindOf(key)}</div></td>
<td><code>${escapeHtml(key.prefix)}...</code></td>
<td class="when wide-only">${time(key.created_at)}</td><td class="when wide-only">${time(key.last_used_at)}</td><td>${action}</td></tr>`;
}

function keyTable(keys: KeyRow[], csrfToken: string, id: string): string {
  return `<div class="scroll"><table id="${id}">
<thead><tr><th>Label</th><th>Prefix</th><th class="wide-only">Created (UTC)</th><th class="wide-only">Last used</th><th></th></tr></thead>
<tbody>
${keys.map((k) => keyRow(k, csrfToken)).join("\n") || '<tr><td colspan="5" class="muted">No keys yet.</td></tr>'}
</tbody></table></div>`;
}

/** The fields of `form`'s draft, if the view has one for it. */
function draftFor(view: DashboardView, form: DraftForm): Record<string, string> | undefined {
  return view.draft?.form === form ? view.draft.fields : undefined;
}

/** The refusal of `form`, if the view answers one. */
function refusalOf(view: DashboardView, form: DraftForm): FormRefusal | undefined {
  return view.refusal?.typed.form === form ? view.refusal : undefined;
}

/** What `form` shows typed into it: a draft kept over a sign-in, or the refused post's fields. */
function typedFor(view: DashboardView, form: DraftForm): Record<string, string> | undefined {
  return draftFor(view, form) ?? refusalOf(view, form)?.typed.fields;
}

/** Above a refused form: why, where the field it names points (`aria-describedby`). */
function refusalNote(refusal: FormRefusal | undefined, id: string): string {
  return refusal
    ? `<p class="notice refusal" role="alert" id="${id}"><strong>${escapeHtml(refusal.message)}</strong></p>`
    : "";
}

/** The field a refusal names: marked invalid, described by the refusal and focused to correct. */
function refusedField(refusal: FormRefusal | undefined, field: string, noteId: string): string {
  return refusal?.field === field
    ? ` aria-invalid="true" aria-describedby="${noteId}" autofocus`
    : "";
}

/** Above a form filled in from its draft: it was not sent, and is to be checked and sent again. */
function draftNote(extra = ""): string {
  return `<p class="notice" role="status">You were signed out before this form was sent, so nothing changed. It is filled in again as you typed it: check it and send it again.${extra}</p>`;
}

/** ` value="..."` of a field filled in from a draft, with `autofocus` on the one to type next. */
const draftValue = (value: string | undefined, focus = false) =>
  `${value === undefined ? "" : ` value="${escapeHtml(value)}"`}${focus ? " autofocus" : ""}`;

const checkedIf = (checked: boolean) => (checked ? " checked" : "");

function keysSection(view: DashboardView): string {
  const draft = draftFor(view, "/dashboard/keys");
  const refusal = refusalOf(view, "/dashboard/keys");
  const typed = typedFor(view, "/dashboard/keys");
  const active = view.keys.filter((k) => !k.revoked_at);
  const revoked = view.keys.filter((k) => k.revoked_at);
  const folded = revoked.length
    ? `<details id="revoked-keys"><summary>${revoked.length} revoked key${revoked.length === 1 ? "" : "s"}</summary>
${keyTable(revoked, view.csrfToken, "revoked-key-table")}</details>`
    : "";
  return `<h2>Keys</h2>
${keyTable(active, view.csrfToken, "keys")}
${folded}
${draft ? draftNote() : ""}${refusalNote(refusal, "key-error")}<form class="create" id="key-create" method="post" action="/dashboard/keys">
  <input type="hidden" name="csrf_token" value="${escapeHtml(view.csrfToken)}">
  <label>New key label <input name="label" required${typed ? draftValue(typed.label, draft !== undefined) : ""}${refusedField(refusal, "label", "key-error")}></label>
  <label class="check"><input type="checkbox" name="shared" value="1"${checkedIf(typed?.shared !== undefined)}> shared</label>
  <button type="submit">Create key</button>
</form>`;
}

const csrfField = (token: string) =>
  `<input type="hidden" name="csrf_token" value="${escapeHtml(token)}">`;

function byokSection(view: DashboardView): string {
  const draft = draftFor(view, "/dashboard/byok");
  const refusal = refusalOf(view, "/dashboard/byok");
  const typed = typedFor(view, "/dashboard/byok");
  const rows = view.byok
    .map(
      (b) =>
        `<tr id="byok-${escapeHtml(b.id)}"><td><span class="nw">${escapeHtml(b.provider)}</span></td><td class="req"><span class="name" title="${escapeHtml(b.label)}">${escapeHtml(b.label)}</span></td><td${b.refused_at === null ? "" : ' class="refused-key"'}><code>${escapeHtml(b.key_hint)}</code>${byokRefusal(b)}</td>
<td><details class="confirm"><summary>Remove</summary>
<form method="post" action="/dashboard/byok/${encodeURIComponent(b.id)}/remove">${csrfField(view.csrfToken)}
<p>Requests go back to the gateway's own provider keys (and are charged).</p>
<button class="danger" type="submit" aria-label="Remove ${escapeHtml(b.label)}">Remove <bdi>${escapeHtml(b.label)}</bdi></button></form></details></td></tr>`,
    )
    .join("\n");
  const providers = view.byokProviders
    .map(
      (p) =>
        `<option value="${escapeHtml(p)}"${typed?.provider === p ? " selected" : ""}>${escapeHtml(p)}</option>`,
    )
    .join("");
  const form = view.byokProviders.length
    ? `${draft ? draftNote(" Type the provider key again: it is never kept.") : ""}${refusalNote(refusal, "byok-error")}<form class="create" id="byok-add" method="post" action="/dashboard/byok">
  ${csrfField(view.csrfToken)}
  <label>Provider <select name="provider" required${refusedField(refusal, "provider", "byok-error")}>${providers}</select></label>
  <label>Label <input name="label" placeholder="optional"${draftValue(typed?.label)}${refusedField(refusal, "label", "byok-error")}></label>
  <label>Provider key <input name="key" type="password" required autocomplete="off" spellcheck="false"${draftValue(undefined, draft !== undefined)}${refusedField(refusal, "key", "byok-error")}></label>
  <button type="submit">Add provider key</button>
</form>`
    : '<p class="muted">No provider of this gateway takes your own keys.</p>';
  return `<h2>Your provider keys (BYOK)</h2>
<p class="muted small">A request to a provider's model uses your keys for it first; such answers cost nothing here. A key its provider refuses is marked until the provider takes it again; meanwhile requests go on to the gateway's own keys, and are charged. Only the last four characters are ever shown.</p>
<div class="scroll"><table id="byok">
<thead><tr><th>Provider</th><th>Label</th><th>Key</th><th></th></tr></thead>
<tbody>
${rows || '<tr><td colspan="4" class="muted">None: requests use the gateway\'s own provider keys.</td></tr>'}
</tbody></table></div>
${form}`;
}

/** A key its provider refused, and since when: the owner replaces or removes it. */
function byokRefusal(b: DashboardByok): string {
  if (b.refused_at === null) return "";
  const since = new Date(b.refused_at).toISOString();
  // The day and the time break apart on a phone, never inside either.
  const [day, time] = utc(since).split(" ", 2);
  return `<div class="refused small">Refused by the provider since <time datetime="${since}"><span class="nw">${escapeHtml(day)}</span> <span class="nw">${escapeHtml(time)} UTC</span></time></div>`;
}

function paygSection(view: DashboardView): string {
  const p = view.payg;
  const draft = draftFor(view, "/dashboard/payg");
  const refusal = refusalOf(view, "/dashboard/payg");
  const typed = typedFor(view, "/dashboard/payg");
  const enabled = typed ? typed.enabled !== undefined : p.enabled;
  const days = Math.round(p.window_seconds / 86_400);
  const window =
    days >= 1 && p.window_seconds % 86_400 === 0
      ? `${days} days`
      : `${count(p.window_seconds)} seconds`;
  return `<h2 id="payg">Pay as you go</h2>
<section class="settings">
<p>When a paid request is not covered by a subscription or the balance, it can be charged to pay as
you go, up to a limit per window of ${escapeHtml(window)}. It is <strong id="payg-state">${p.enabled ? "on" : "off"}</strong>.</p>
${draft ? draftNote() : ""}${refusalNote(refusal, "payg-error")}<form class="create" id="payg-form" method="post" action="/dashboard/payg">
  ${csrfField(view.csrfToken)}
  <label class="check"><input type="checkbox" name="enabled" value="1"${checkedIf(enabled)}> Pay as you go on</label>
  <label>Limit (IDR) <input name="limit_idr" type="number" min="0" step="any" required${draftValue(typed ? (typed.limit_idr ?? "") : String(p.limit_idr), draft !== undefined)}${refusedField(refusal, "limit_idr", "payg-error")} size="10"></label>
  <button type="submit">Save</button>
</form></section>`;
}

type NavTarget = "/dashboard" | "/dashboard/device";

/** `current`: the link to the page shown, marked as such. */
function topNav(csrfToken: string, current?: NavTarget): string {
  const link = (href: NavTarget, text: string) =>
    `<a href="${href}"${href === current ? ' aria-current="page"' : ""}>${text}</a>`;
  return `<nav class="top">${link("/dashboard", "Dashboard")}${link("/dashboard/device", "Approve a login")}
<form class="inline" method="post" action="/dashboard/logout">${csrfField(csrfToken)}<button class="link" type="submit">Sign out</button></form></nav>`;
}

export function dashboardPage(view: DashboardView, status: Page["status"] = 200): Page {
  const notice = view.notice
    ? `<p class="notice" role="status"><strong>${escapeHtml(view.notice)}</strong></p>`
    : "";
  const created = view.newKey
    ? `<section class="new-key"><p>New key <strong><bdi>${escapeHtml(view.newKey.label)}</bdi></strong>. Copy it now: it is shown only once.</p>
<p class="key" id="new-key-value">${escapeHtml(view.newKey.value)}</p>
<button type="button" class="primary" data-copy="new-key-value" hidden>Copy key</button></section>`
    : "";
  const keyLabels = new Map(view.keys.map((k) => [k.id, k.label]));
  return {
    status,
    html: layout(
      `Dashboard of account ${view.accountId}`,
      `<header class="top"><h1>Dashboard of account ${escapeHtml(view.accountId)}</h1>
${topNav(view.csrfToken, "/dashboard")}</header>
${notice}${created}
${quotaCards(view.quota)}
${usageSection(view.usage)}
${recentSection(view.usage.recent, keyLabels)}
${jobsSection(view.jobs)}
${keysSection(view)}
${byokSection(view)}
${paygSection(view)}`,
      view.csrfToken,
      true,
    ),
  };
}

export function signedOutPage(): Page {
  return page(
    200,
    "Signed out",
    `<p>This browser's dashboard session is closed; its cookie opens nothing any more.</p>
${ownerLinkHelp()}`,
  );
}

export interface RequestDetail {
  row: RequestLogRow;
  keyLabel: string | null;
  provider: string | null;
}

const yesNo = (b: boolean) => (b ? "yes" : "no");

/** How a request was paid for, in the owner's words where the label alone would not say. */
function paidBy(r: { state: string; payment: string }): string {
  const how = r.payment === "byok" ? "your own provider key (byok)" : r.payment;
  return r.state === "failed" ? `nothing charged; it was to be paid by ${how}` : how;
}

/** One request of the log, everything it recorded. */
export function requestPage(detail: RequestDetail, csrfToken: string): Page {
  const r = detail.row;
  const when = (ms: number | null) => {
    if (ms === null) return "-";
    const iso = new Date(ms).toISOString();
    return `<span class="nw">${iso.slice(0, 10)}</span> <span class="nw">${iso.slice(11, 23)}</span>`;
  };
  const omitted = r.tools_omitted ? (JSON.parse(r.tools_omitted) as string[]) : [];
  const outcome = outcomeOf(r);
  const served = servedStep(r);
  const facts: [string, string, string?][] = [
    ["Request id", `<code>${escapeHtml(r.id)}</code>`, "request-id"],
    [
      "Status",
      `${statusPill(r, outcome)} <span class="muted">${escapeHtml(r.state)}</span><div class="muted small">${escapeHtml(outcome.meaning)}</div>`,
      "request-status",
    ],
    ["Error code", r.error_code ? `<code>${escapeHtml(r.error_code)}</code>` : "-", "request-code"],
    ["Model", r.model ? `<code>${escapeHtml(r.model)}</code>` : "-"],
    ["Endpoint", escapeHtml(r.endpoint)],
    ...(r.job_id
      ? [["Job", `<code>${escapeHtml(r.job_id)}</code>`, "request-job"] as [string, string, string]]
      : []),
    ["Provider", escapeHtml(detail.provider ?? "-")],
    // A route's name is the model above; this is the step of it that answered. The model asked
    // for, when it answered itself, is not said twice.
    ...(served
      ? [
          ["Served by", `<code>${escapeHtml(served)}</code>`, "request-served-model"] as [
            string,
            string,
            string,
          ],
        ]
      : []),
    ["Started (UTC)", when(r.created_at)],
    ["Finished (UTC)", when(r.finished_at)],
    ["Streamed", yesNo(r.stream === 1)],
    [
      "Tokens",
      `<span id="request-tokens">${count(r.input_tokens)} in, ${count(r.output_tokens)} out</span>`,
    ],
    ["Cost", `<span id="request-cost">${escapeHtml(formatIdr(microToIdr(r.cost_micro)))}</span>`],
    ["Held while running", escapeHtml(formatIdr(microToIdr(r.reserved_micro)))],
    ["Paid by", escapeHtml(paidBy(r))],
    ["Key", escapeHtml(detail.keyLabel ?? r.key_id ?? "-")],
  ];
  if (omitted.length) facts.push(["Tools left out", escapeHtml(omitted.join(", "))]);
  const list = facts
    .map(([name, value, id]) => `<dt>${name}</dt><dd${id ? ` id="${id}"` : ""}>${value}</dd>`)
    .join("\n");
  return {
    status: 200,
    html: layout(
      `Request ${r.id}`,
      `<header class="top"><h1>Request</h1>${topNav(csrfToken)}</header>
<p><a href="/dashboard#recent">Back to recent requests</a></p>
<dl class="facts" id="request">
${list}
</dl>`,
      csrfToken,
      true,
    ),
  };
}

/**
 * A dashboard address no page has (a typo, an old bookmark, a form's address opened): what was
 * asked for and the way back, for anyone (it shows nothing of the account).
 */
export function noSuchPage(path: string, takes: readonly string[]): Page {
  const formOnly =
    takes.length > 0
      ? `<p>This address takes ${escapeHtml(takes.join(", "))} requests only: the dashboard's own forms and links send them.</p>\n`
      : "";
  return page(
    404,
    "Page not found",
    `<p>The dashboard has no page at <code class="path">${escapeHtml(path)}</code>.</p>
${formOnly}<p><a href="/dashboard">Go to the dashboard</a></p>`,
  );
}

export function requestNotFoundPage(): Page {
  return page(
    404,
    "No such request",
    `<p>This account's request log has no request with this id.</p>
<p><a href="/dashboard">Go to the dashboard</a></p>`,
  );
}
