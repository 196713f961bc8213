import type { z } from "zod";
import { cliCommand } from "../cli-command.js";
import { describeSystemError } from "../system-errors.js";
import type { CreatedKey, DeviceCodeResponse, KeyView, RevokedKey, WhoAmI } from "./api-schemas.js";
import { type ActiveCredential, activeCredential, defaultProfile } from "./credentials/index.js";
import { UserError } from "./errors.js";

/**
 * The CLI's client for the gateway's /api routes. Every failure becomes a UserError with one
 * readable line; no key value ever appears in a message.
 */

const defaultBaseUrl = "http://127.0.0.1:8787";
const requestTimeoutMs = 15_000;
/** Ctrl-C should end the CLI promptly even when the gateway does not answer. */
const cancelTimeoutMs = 2_000;

/** --base-url, then GATEWAY_BASE_URL, then what the profile was logged in to, then the default. */
export function resolveBaseUrl(flag: string | undefined, stored?: string): string {
  const chosen = flag ?? process.env.GATEWAY_BASE_URL ?? stored ?? defaultBaseUrl;
  if (!/^https?:\/\//i.test(chosen)) {
    throw new UserError(`the gateway URL must start with http:// or https://, got "${chosen}"`);
  }
  let url: URL;
  try {
    url = new URL(chosen);
  } catch {
    throw new UserError(`"${chosen}" is not a URL; use something like ${defaultBaseUrl}`);
  }
  if (url.search || url.hash || url.username || url.password) {
    throw new UserError(
      `the gateway URL takes no query, fragment or credentials, got "${chosen}"; use something like ${defaultBaseUrl}`,
    );
  }
  // SDK configs hold the OpenAI base URL (".../v1"); the CLI talks to the gateway's root.
  return url.origin + url.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
}

export type { CreatedKey, DeviceCodeResponse, KeyView, RevokedKey, WhoAmI };

export type DeviceTokenResult =
  | { ok: true; key: string; keyId: string; accountId: string }
  | { ok: false; error: string; interval?: number };

type ApiSchemas = typeof import("./api-schemas.js");
const apiSchemas = (): Promise<ApiSchemas> => import("./api-schemas.js");

export interface ClientOptions {
  baseUrl: string;
  key?: string;
  /** Told to the user when the gateway refuses the key (401): how to get a working one. */
  onUnauthorized?: string;
  fetch?: typeof fetch;
}

export class GatewayClient {
  private readonly fetchFn: typeof fetch;

  constructor(private readonly options: ClientOptions) {
    this.fetchFn = options.fetch ?? fetch;
  }

  get baseUrl(): string {
    return this.options.baseUrl;
  }

  /** The same gateway, reached the same way, with another key. */
  withKey(key: string): GatewayClient {
    return new GatewayClient({ ...this.options, key });
  }

  async requestDeviceCode(clientName: string): Promise<DeviceCodeResponse> {
    const res = await this.send(
      "POST",
      "/api/auth/device/code",
      { client_name: clientName },
      false,
    );
    return this.parse(res, (s) => s.deviceCodeResponse);
  }

  /** The RFC 8628 errors (pending, slow_down, denied, expired) are results here, not exceptions. */
  async pollDeviceToken(deviceCode: string): Promise<DeviceTokenResult> {
    const res = await this.send(
      "POST",
      "/api/auth/device/token",
      { device_code: deviceCode },
      false,
    );
    if (res.status === 400) {
      const { deviceTokenError } = await apiSchemas();
      const body = deviceTokenError.safeParse(await res.json().catch(() => undefined));
      if (body.success) return { ok: false, error: body.data.error, interval: body.data.interval };
    }
    const token = await this.parse(res, (s) => s.deviceTokenSuccess);
    return { ok: true, key: token.access_token, keyId: token.key_id, accountId: token.account_id };
  }

  /** Tells the gateway this CLI stopped waiting, so the code can no longer be approved. */
  async cancelDeviceCode(deviceCode: string): Promise<void> {
    await this.send(
      "POST",
      "/api/auth/device/cancel",
      { device_code: deviceCode },
      false,
      cancelTimeoutMs,
    );
  }

  async whoami(): Promise<WhoAmI> {
    return this.parse(await this.send("GET", "/api/auth/whoami"), (s) => s.whoamiResponse);
  }

  async logout(): Promise<RevokedKey> {
    return this.parse(await this.send("POST", "/api/auth/logout"), (s) => s.revoked);
  }

  async createKey(label: string, shared: boolean): Promise<CreatedKey> {
    return this.parse(await this.send("POST", "/api/keys", { label, shared }), (s) => s.createdKey);
  }

  async listKeys(): Promise<KeyView[]> {
    return (await this.parse(await this.send("GET", "/api/keys"), (s) => s.keyList)).data;
  }

  async revokeKey(idOrLabel: string): Promise<RevokedKey> {
    const path = `/api/keys/${encodeURIComponent(idOrLabel)}`;
    return this.parse(await this.send("DELETE", path), (s) => s.revoked);
  }

  private async send(
    method: string,
    path: string,
    body?: unknown,
    withKey = true,
    timeoutMs = requestTimeoutMs,
  ): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (withKey) {
      if (!this.options.key)
        throw new UserError(
          `not logged in; run \`${cliCommand("login")}\` (or set GATEWAY_API_KEY)`,
        );
      headers.authorization = `Bearer ${this.options.key}`;
    }
    try {
      return await this.fetchFn(`${this.options.baseUrl}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      throw new UserError(
        `cannot reach the gateway at ${this.options.baseUrl} (${networkReason(err)}); is \`${cliCommand("serve")}\` running? Use --base-url or GATEWAY_BASE_URL to point elsewhere`,
      );
    }
  }

  /** The answer as `pick` chooses its schema, or the failure it says, in one line. */
  private async parse<T extends z.ZodType>(
    res: Response,
    pick: (schemas: ApiSchemas) => T,
  ): Promise<z.infer<T>> {
    const text = await res.text().catch(() => "");
    const schemas = await apiSchemas();
    if (!res.ok) throw this.failure(res, text, schemas);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new UserError(
        `the gateway at ${this.options.baseUrl} sent a response that is not JSON (HTTP ${res.status}); is it a Model Gateway?`,
      );
    }
    const parsed = pick(schemas).safeParse(json);
    if (!parsed.success) {
      throw new UserError(
        `the gateway at ${this.options.baseUrl} sent an unexpected response (HTTP ${res.status}); is the CLI the same version as the server?`,
      );
    }
    return parsed.data;
  }

  private failure(res: Response, text: string, schemas: ApiSchemas): UserError {
    if (res.status === 401) {
      // 401 bodies are plain text by design ("invalid API key", "API key revoked", ...).
      const reason = text.trim().slice(0, 200) || "unauthorized";
      return new UserError(
        `the gateway refused the key: ${reason}; ${this.options.onUnauthorized ?? `run \`${cliCommand("login")}\``}`,
      );
    }
    let message = text.trim().slice(0, 300) || res.statusText;
    let code: string | undefined;
    try {
      const json: unknown = JSON.parse(text);
      const body = schemas.chatStyleError.safeParse(json);
      const oauth = schemas.oauthStyleError.safeParse(json);
      if (body.success) {
        message = body.data.error.message;
        code = body.data.error.code ?? undefined;
      } else if (oauth.success) {
        message = oauth.data.error_description;
        code = oauth.data.error;
      }
    } catch {
      // Not JSON (a plain-text refusal): the text itself is the message.
    }
    const tag = code ? `${res.status} ${code}` : `HTTP ${res.status}`;
    if (res.status === 429)
      return new UserError(
        `the gateway is rate limiting this (${tag}): ${message} Wait a minute and try again.`,
      );
    return new UserError(`${message.replace(/\.$/, "")} (${tag})`);
  }
}

function networkReason(err: unknown): string {
  if (err instanceof Error && err.name === "TimeoutError")
    return `no answer within ${requestTimeoutMs / 1000} s`;
  return describeSystemError(err instanceof Error && err.cause ? err.cause : err);
}

/** Options every command that talks to the gateway accepts. */
export interface ConnectionOptions {
  baseUrl?: string;
  profile: string;
}

/** A client carrying the active key (GATEWAY_API_KEY or the profile's login key). */
export async function connectWithKey(
  opts: ConnectionOptions,
): Promise<{ client: GatewayClient; credential: ActiveCredential }> {
  const credential = await activeCredential(opts.profile);
  if (!credential) {
    const which = opts.profile === defaultProfile ? "" : ` --profile ${opts.profile}`;
    throw new UserError(
      `not logged in; run \`${cliCommand(`login${which}`)}\` (or set GATEWAY_API_KEY)`,
    );
  }
  const baseUrl = resolveBaseUrl(opts.baseUrl, credential.baseUrl);
  // A stored login key belongs to the gateway it was approved by: a --base-url or
  // GATEWAY_BASE_URL naming another one (a typo, a shell left pointing elsewhere) must not be
  // sent it, as gh keeps each host's token to that host.
  if (credential.stored && credential.baseUrl !== undefined) {
    const own = resolveBaseUrl(credential.baseUrl);
    if (own !== baseUrl) {
      throw new UserError(
        `the login key is for ${own}, not ${baseUrl}; run \`${cliCommand(`login --base-url ${baseUrl}`)}\` to log in there (or set GATEWAY_API_KEY)`,
      );
    }
  }
  const client = new GatewayClient({
    baseUrl,
    key: credential.key,
    onUnauthorized: credential.stored
      ? `run \`${cliCommand("login")}\` again`
      : `check GATEWAY_API_KEY, or unset it to use the key from \`${cliCommand("login")}\``,
  });
  return { client, credential };
}
