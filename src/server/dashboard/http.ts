import type { Context } from "hono";
import type { Page } from "./pages.js";

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

export function sendPage(c: Context, page: Page): Response {
  return c.body(page.html, page.status, pageHeaders);
}

/** A form field as one string; repeated or file fields count as missing. */
export function formField(form: Record<string, unknown>, name: string): string | undefined {
  const value = form[name];
  return typeof value === "string" ? value : undefined;
}
