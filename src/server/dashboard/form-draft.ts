import { z } from "zod";
import { keyLabelMaxChars } from "../../store/key-rows.js";
import { formatUserCode, normalizeUserCode } from "../auth/device-codes.js";

/**
 * A form posted after the owner's session ended is not acted on: without the session its CSRF
 * token cannot be checked. What was typed into it is kept instead (a draft), so that once the
 * owner has signed in again the form comes back filled in, to be checked and sent again with the
 * new session's token. A draft lives only in this browser's HttpOnly cookie, is made only from a
 * post of the gateway's own page (another site cannot fill in the owner's forms) and never holds
 * a secret: a BYOK form's provider key is typed again.
 */

export const formDraftCookieName = "gateway_form_draft";

/** The forms a draft is kept for, by where they post, and the fields it keeps of each. */
const keptFields = {
  "/dashboard/keys": ["label", "shared"],
  "/dashboard/byok": ["provider", "label"],
  "/dashboard/payg": ["enabled", "limit_idr"],
} as const;

export type DraftForm = keyof typeof keptFields;

export interface FormDraft {
  form: DraftForm;
  /** A checkbox's field is present when it was checked. */
  fields: Record<string, string>;
}

/**
 * A draft keeps this many characters (code points, as a key's label is counted) of a field: the
 * longest label a form takes; a limit typed longer is no number anyway.
 */
const maxFieldLength = keyLabelMaxChars;

const isDraftForm = (path: string): path is DraftForm => Object.hasOwn(keptFields, path);

/** The draft of a form posted to `path`, if that form keeps one. */
export function draftOf(path: string, form: Record<string, unknown>): FormDraft | undefined {
  if (!isDraftForm(path)) return undefined;
  return { form: path, fields: keptOf(path, form) };
}

/**
 * What was typed into `form`'s kept fields, whole (never a provider key): a form the gateway
 * refused comes back with it, to be corrected.
 */
export function typedInto(form: DraftForm, values: Record<string, unknown>): FormDraft {
  const fields: Record<string, string> = {};
  for (const name of keptFields[form]) {
    const value = values[name];
    if (typeof value === "string") fields[name] = value;
  }
  return { form, fields };
}

/** The kept fields, each cut to what a cookie keeps: whole characters, never half an emoji. */
function keptOf(form: DraftForm, values: Record<string, unknown>): Record<string, string> {
  const fields = typedInto(form, values).fields;
  for (const [name, value] of Object.entries(fields))
    fields[name] = Array.from(value).slice(0, maxFieldLength).join("");
  return fields;
}

/** Base64url of its JSON: a cookie value as it is, whatever was typed. */
export function encodeDraft(draft: FormDraft): string {
  return Buffer.from(JSON.stringify(draft)).toString("base64url");
}

const draftSchema = z.object({
  form: z.string().refine(isDraftForm),
  fields: z.record(z.string(), z.string()),
});

/** A draft cookie's value read back; anything else (an old or edited cookie) is no draft. */
export function decodeDraft(value: string | undefined): FormDraft | undefined {
  if (!value) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(value, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
  const parsed = draftSchema.safeParse(json);
  if (!parsed.success || !isDraftForm(parsed.data.form)) return undefined;
  return { form: parsed.data.form, fields: keptOf(parsed.data.form, parsed.data.fields) };
}

/**
 * The page a form posted without a session leads back to once signed in: the login's approval
 * page for its decision, the dashboard for its own forms, none after a sign-out.
 */
export function returnPageOf(
  path: string,
  form: Record<string, unknown> | undefined,
): string | undefined {
  if (path === "/dashboard/logout") return undefined;
  if (path === "/dashboard/device/approve" || path === "/dashboard/device/deny") {
    const typed = form?.user_code;
    const code = typeof typed === "string" ? normalizeUserCode(typed) : undefined;
    return code ? `/dashboard/device?user_code=${formatUserCode(code)}` : "/dashboard/device";
  }
  return "/dashboard";
}
