import { z } from "zod";

/**
 * What the gateway's /api routes answer, as the CLI checks it. Apart from api-client.ts, and
 * loaded only when an answer is read: zod's import is about half of a short command's CPU, and
 * most of the CLI's refusals (no login, a bad flag) never read one.
 */

/**
 * What login prints and opens as it came: a web page's URL and a code, in printable ASCII, so
 * no answer can drive the terminal or have the browser opener start something else.
 */
const approvalUrl = z.string().regex(/^https?:\/\/[\x21-\x7e]+$/i);
export const deviceCodeResponse = z.object({
  device_code: z.string(),
  user_code: z.string().regex(/^[\x21-\x7e]{1,32}$/),
  verification_uri: approvalUrl,
  verification_uri_complete: approvalUrl.optional(),
  expires_in: z.number().positive(),
  interval: z.number().positive().optional(),
});
export type DeviceCodeResponse = z.infer<typeof deviceCodeResponse>;

/**
 * A gateway key as the CLI takes it: it goes in an HTTP header (and `gateway mcp` pastes it into
 * an agent's config), so one with a control character is no gateway's answer.
 */
const gatewayKey = z.string().regex(/^kn-[\x21-\x7e]+$/);
/**
 * An id login prints, stores, and `logout` prints again later: no control, format or line
 * separator character, so none can drive the terminal or forge a line (an account id from a
 * config may be any name, `café` included).
 */
const printedId = z.string().regex(/^[^\p{Cc}\p{Cf}\p{Zl}\p{Zp}]+$/u);
export const deviceTokenSuccess = z.object({
  access_token: gatewayKey,
  token_type: z.string(),
  key_id: printedId,
  account_id: printedId,
});
export const deviceTokenError = z.object({
  error: z.string(),
  error_description: z.string().optional(),
  interval: z.number().optional(),
});

export const whoamiResponse = z.object({
  account_id: z.string(),
  key_id: z.string(),
  kind: z.string(),
  parent_key_id: z.string().nullable(),
  label: z.string(),
  prefix: z.string(),
});
export type WhoAmI = z.infer<typeof whoamiResponse>;

export const keyView = z.object({
  id: z.string(),
  label: z.string(),
  kind: z.string(),
  parent_key_id: z.string().nullable(),
  prefix: z.string(),
  created_at: z.number(),
  last_used_at: z.number().nullable(),
  revoked_at: z.number().nullable(),
});
export type KeyView = z.infer<typeof keyView>;
export const keyList = z.object({ data: z.array(keyView) });

export const createdKey = z.object({
  id: z.string(),
  // Printed as it came.
  key: gatewayKey,
  label: z.string(),
  kind: z.string(),
  parent_key_id: z.string().nullable(),
  created_at: z.number(),
});
export type CreatedKey = z.infer<typeof createdKey>;

export const revoked = z.object({
  id: z.string(),
  revoked: z.boolean(),
  already_revoked: z.boolean().optional(),
  revoked_at: z.number().optional(),
});
export type RevokedKey = z.infer<typeof revoked>;

export const chatStyleError = z.object({
  error: z.object({ message: z.string(), code: z.string().nullable().optional() }),
});
/** The device endpoints answer in the OAuth shape (RFC 8628). */
export const oauthStyleError = z.object({ error: z.string(), error_description: z.string() });
