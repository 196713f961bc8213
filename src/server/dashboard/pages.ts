import type { KeyRow } from "../../store/types.js";
import type { DecisionRefusal } from "./device-codes.js";

/**
 * The dashboard's HTML: plain forms, no JavaScript, readable in a text browser.
 * Every dynamic value goes through `escapeHtml`.
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
  .key { font: 1rem ui-monospace, monospace; padding: .5rem; background: #f3f3f3; word-break: break-all; }
  form.inline { display: inline; }
  button { font-size: 1rem; padding: .5rem 1.4rem; margin-right: .6rem; border-radius: .3rem;
           border: 1px solid #1b1b1b; background: #fff; cursor: pointer; }
  button.primary { background: #1b5e20; border-color: #1b5e20; color: #fff; }
  table { border-collapse: collapse; width: 100%; font-size: .9rem; }
  th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #ddd; }
  .muted { color: #666; }
  pre.cmd { font: 1rem ui-monospace, monospace; padding: .6rem .8rem; background: #f3f3f3;
            border-radius: .3rem; overflow-x: auto; }
`;

function layout(title: string, body: string, csrfToken?: string): string {
  const csrfMeta = csrfToken ? `\n<meta name="csrf-token" content="${escapeHtml(csrfToken)}">` : "";
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">${csrfMeta}
<title>${escapeHtml(title)} - Model Gateway</title>
<style>${styles}</style>
</head>
<body>
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

const ownerLinkHelp = `<p>In a terminal where <code>gateway serve</code> runs, get a fresh one-time owner URL:</p>
<pre class="cmd">gateway owner-link</pre>
<p class="muted">Add <code>--db FILE</code> if the server runs on another database than
<code>./gateway.db</code>. Open the URL it prints in this browser.</p>`;

/** `returnTo`: the page the owner will be sent back to after signing in, if any. */
export function signInNeededPage(returnTo?: string): Page {
  const back = returnTo
    ? `<p>After signing in you come back to this page (<code>${escapeHtml(returnTo)}</code>).</p>`
    : "";
  return page(
    401,
    "Sign in to the gateway dashboard",
    `<p>This page needs the owner's dashboard session, and this browser has none.</p>
${ownerLinkHelp}
${back}`,
  );
}

export function ownerLinkInvalidPage(): Page {
  return page(
    401,
    "This owner link does not work",
    `<p>The link was already used, or it is not a link printed by this gateway. Each owner URL works once.</p>
${ownerLinkHelp}`,
  );
}

export function forbiddenPage(reason: string): Page {
  return page(403, "Request refused", `<p>${escapeHtml(reason)}</p>`);
}

export function userCodeFormPage(message?: string): Page {
  const note = message ? `<p><strong>${escapeHtml(message)}</strong></p>` : "";
  return page(
    message ? 400 : 200,
    "Approve a gateway login",
    `${note}<p>Enter the code that <code>gateway login</code> shows in your terminal.</p>
<form method="get" action="/dashboard/device">
  <label>Code <input name="user_code" autocomplete="off" placeholder="XXXX-XXXX" size="12"></label>
  <button type="submit">Continue</button>
</form>`,
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
  const client = input.clientName ? ` from <strong>${escapeHtml(input.clientName)}</strong>` : "";
  const minutes = Math.max(1, Math.round(input.expiresInSeconds / 60));
  return page(
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
  );
}

const decisionLinks = `<p><a href="/dashboard/device">Enter another code</a> ·
<a href="/dashboard">Go to the dashboard</a></p>`;

export function decisionRefusedPage(refusal: DecisionRefusal): Page {
  const [status, title, text]: [Page["status"], string, string] = {
    unknown: [
      404,
      "Unknown code",
      "No login request has this code. Check the code in your terminal, or run <code>gateway login</code> again.",
    ],
    expired: [
      400,
      "This code has expired",
      "The login request timed out before it was approved. Run <code>gateway login</code> again.",
    ],
    used: [
      400,
      "This code was already used",
      "This login request was already approved or denied. Run <code>gateway login</code> again if needed.",
    ],
    cancelled: [
      400,
      "This login was cancelled",
      "The terminal that asked for this login stopped waiting (Ctrl-C, or it went away), so it cannot be approved. Run <code>gateway login</code> again.",
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
enter the code exactly as <code>gateway login</code> shows it.</p>`,
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
  return ms === null ? "-" : new Date(ms).toISOString().replace("T", " ").slice(0, 19);
}

function keyRow(key: KeyRow, csrfToken: string): string {
  const action = key.revoked_at
    ? `revoked ${time(key.revoked_at)}`
    : `<form class="inline" method="post" action="/dashboard/keys/${encodeURIComponent(key.id)}/revoke">
        <input type="hidden" name="csrf_token" value="${escapeHtml(csrfToken)}">
        <button type="submit">Revoke</button></form>`;
  return `<tr><td><code>${escapeHtml(key.id)}</code></td><td>${escapeHtml(key.label)}</td>
  <td>${escapeHtml(key.kind)}</td><td><code>${escapeHtml(key.prefix)}...</code></td>
  <td>${time(key.created_at)}</td><td>${time(key.last_used_at)}</td><td>${action}</td></tr>`;
}

export function dashboardPage(input: {
  accountId: string;
  keys: KeyRow[];
  csrfToken: string;
  notice?: string;
  newKey?: { label: string; value: string };
}): Page {
  const notice = input.notice ? `<p><strong>${escapeHtml(input.notice)}</strong></p>` : "";
  const created = input.newKey
    ? `<p>New key <strong>${escapeHtml(input.newKey.label)}</strong>. Copy it now; it is shown only once:</p>
<p class="key">${escapeHtml(input.newKey.value)}</p>`
    : "";
  const rows = input.keys.map((k) => keyRow(k, input.csrfToken)).join("\n");
  return page(
    200,
    `Keys of account ${input.accountId}`,
    `${notice}${created}
<table>
<thead><tr><th>ID</th><th>Label</th><th>Kind</th><th>Prefix</th><th>Created (UTC)</th><th>Last used</th><th></th></tr></thead>
<tbody>
${rows || '<tr><td colspan="7">No keys yet.</td></tr>'}
</tbody>
</table>
<h2>Create a key</h2>
<form method="post" action="/dashboard/keys">
  <input type="hidden" name="csrf_token" value="${escapeHtml(input.csrfToken)}">
  <label>Label <input name="label" required maxlength="100"></label>
  <label><input type="checkbox" name="shared" value="1"> shared</label>
  <button type="submit">Create</button>
</form>
<p class="muted">Approving a <code>gateway login</code>? Open <a href="/dashboard/device">/dashboard/device</a>.</p>`,
    input.csrfToken,
  );
}
