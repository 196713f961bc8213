import type { z } from "zod";
import { cliCommand } from "../cli-command.js";
import { shownText } from "../server/http/shown-text.js";
import { keyPrefix, redactSecrets, shownUrl } from "../store/secrets.js";
import { describeSystemError } from "../system-errors.js";
import type { CreatedKey, DeviceCodeResponse, KeyView, RevokedKey, WhoAmI } from "./api-schemas.js";
import {
  type ActiveCredential,
  activeCredential,
  type FoundLogin,
  type StoredLogin,
  withProfile,
} from "./credentials/index.js";
import { UsageError, UserError } from "./errors.js";
import { note, type TextOutput } from "./output.js";

/**
 * The CLI's client for the gateway's /api routes. Every failure becomes a UserError with one
 * readable line; no key value ever appears in a message.
 */

const defaultBaseUrl = "http://127.0.0.1:8787";
/** How long one exchange with the gateway may take, its answer's body included. */
const defaultAnswerTimeoutMs = 15_000;
const answerTimeoutEnv = "GATEWAY_TIMEOUT_MS";
/** Ctrl-C should end the CLI promptly even when the gateway does not answer. */
const cancelTimeoutMs = 2_000;

/**
 * GATEWAY_TIMEOUT_MS, else 15 s: a gateway that takes a connection and never answers, or sends
 * its headers and then nothing (or a body that never ends), would otherwise hold the command for
 * as long as the connection stands.
 */
export function answerTimeoutMs(): number {
  const set = process.env[answerTimeoutEnv];
  if (set === undefined || set === "") return defaultAnswerTimeoutMs;
  const ms = /^\d{1,9}$/.test(set.trim()) ? Number(set.trim()) : 0;
  if (ms <= 0)
    throw new UserError(
      `${answerTimeoutEnv} must be a whole number of milliseconds above 0, got "${oneLine(set, 40)}"; unset it for the default ${defaultAnswerTimeoutMs} ms`,
    );
  return ms;
}

/** --base-url, then GATEWAY_BASE_URL, then what the profile was logged in to, then the default. */
export function resolveBaseUrl(flag: string | undefined, stored?: string): string {
  const chosen = flag ?? process.env.GATEWAY_BASE_URL ?? stored ?? defaultBaseUrl;
  // A --base-url the CLI cannot use is the command line's mistake (exit code 2); the
  // environment's is not.
  return gatewayRoot(chosen, flag === undefined ? UserError : UsageError);
}

/** The gateway's root URL of `chosen`, or `Mistake` saying what is wrong with it. */
function gatewayRoot(chosen: string, Mistake: new (message: string) => UserError): string {
  // Quoted without what may be a secret: a token as the user, a `?key=`, a key pasted here.
  const shown = shownUrl(chosen);
  if (!/^https?:\/\//i.test(chosen)) {
    throw new Mistake(`the gateway URL must start with http:// or https://, got "${shown}"`);
  }
  let url: URL;
  try {
    url = new URL(chosen);
  } catch {
    throw new Mistake(`"${shown}" is not a URL; use something like ${defaultBaseUrl}`);
  }
  if (url.search || url.hash || url.username || url.password) {
    throw new Mistake(
      `the gateway URL takes no query, fragment or credentials, got "${shown}"; use something like ${defaultBaseUrl}`,
    );
  }
  // SDK configs hold the OpenAI base URL (".../v1"); the CLI talks to the gateway's root.
  return url.origin + url.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
}

export type { CreatedKey, DeviceCodeResponse, KeyView, RevokedKey, WhoAmI };

/**
 * The gateway answered with an error status: the line the user reads, and the status for a caller
 * that tells cases apart (logout takes a 401 as "already not accepted").
 */
export class GatewayRefusal extends UserError {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = "GatewayRefusal";
  }
}

export type DeviceTokenResult =
  | { ok: true; key: string; keyId: string; accountId: string }
  | { ok: false; error: string; description?: string; interval?: number };

type ApiSchemas = typeof import("./api-schemas.js");
const apiSchemas = (): Promise<ApiSchemas> => import("./api-schemas.js");

export interface ClientOptions {
  baseUrl: string;
  key?: string;
  /**
   * Which key this is, for the user, when the gateway refuses it (`the login key key_... of
   * profile "default"`): its id and where it came from, never its value.
   */
  keyName?: string;
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

  /**
   * The same gateway (or `baseUrl`, the one that key belongs to), reached the same way, with
   * another key, which is not the one `keyName` names.
   */
  withKey(key: string, baseUrl = this.options.baseUrl): GatewayClient {
    return new GatewayClient({ ...this.options, key, baseUrl, keyName: undefined });
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
      const schemas = await apiSchemas();
      // Read once: a 400 that is no RFC 8628 error (a proxy's page, a plain refusal) is shown.
      const text = await this.answerText(res);
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      const body = schemas.deviceTokenError.safeParse(json);
      if (!body.success) throw this.failure(res, text, schemas, false);
      return {
        ok: false,
        error: body.data.error,
        description: body.data.error_description,
        interval: body.data.interval,
      };
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
    // Here a 404 is the gateway's own answer (no such key), not a URL that leads nowhere.
    return this.parse(await this.send("DELETE", path), (s) => s.revoked, true);
  }

  private async send(
    method: string,
    path: string,
    body?: unknown,
    withKey = true,
    timeoutMs = answerTimeoutMs(),
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
        // Bounds the body's reading too (`answerText`): the whole answer comes within it.
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const { baseUrl } = this.options;
      if (timedOut(err))
        throw new UserError(
          `the gateway at ${baseUrl} took the connection but did not answer ${method} ${path} within ${seconds(timeoutMs)}; it may be stuck or overloaded: check its \`${cliCommand("serve")}\` (restart it if it does not answer), or allow longer with ${answerTimeoutEnv}`,
        );
      if (answeredWithoutTls(err))
        throw new UserError(
          `the gateway at ${baseUrl} answers plain HTTP, not HTTPS; use ${baseUrl.replace(/^https:/i, "http:")} (--base-url or GATEWAY_BASE_URL)`,
        );
      if (/^http:/i.test(baseUrl) && closedWithoutAnswer(err))
        throw new UserError(
          `the server at ${baseUrl} closed the connection without answering; it may speak HTTPS: try ${baseUrl.replace(/^http:/i, "https:")} (--base-url or GATEWAY_BASE_URL)`,
        );
      throw new UserError(
        `cannot reach the gateway at ${baseUrl} (${networkReason(err)}); is \`${cliCommand("serve")}\` running? Use --base-url or GATEWAY_BASE_URL to point elsewhere`,
      );
    }
  }

  /** The answer as `pick` chooses its schema, or the failure it says, in one line. */
  private async parse<T extends z.ZodType>(
    res: Response,
    pick: (schemas: ApiSchemas) => T,
    notFoundIsAnswer = false,
  ): Promise<z.infer<T>> {
    const text = await this.answerText(res);
    const schemas = await apiSchemas();
    if (!res.ok) throw this.failure(res, text, schemas, notFoundIsAnswer);
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

  /**
   * The answer's body. One that stops coming (its headers sent, then nothing, or a body that never
   * ends) is cut by the exchange's bound, and said so, rather than taken for an empty answer.
   */
  private async answerText(res: Response): Promise<string> {
    try {
      return await res.text();
    } catch (err) {
      const { baseUrl } = this.options;
      const what = `the gateway at ${baseUrl} sent the headers of its answer (HTTP ${res.status}${requestIdOf(res)})`;
      if (timedOut(err))
        throw new UserError(
          `${what} but not all of its body within ${seconds(answerTimeoutMs())}; it may be stuck or overloaded: check its \`${cliCommand("serve")}\` (restart it if it does not answer) and run the command again, or allow longer with ${answerTimeoutEnv}`,
        );
      throw new UserError(
        `${what} and then closed the connection before its body was whole (${networkReason(err)}); run the command again`,
      );
    }
  }

  private failure(
    res: Response,
    text: string,
    schemas: ApiSchemas,
    notFoundIsAnswer: boolean,
  ): GatewayRefusal {
    // What answered may be no gateway (a proxy, a server that echoes its request): the key this
    // client sent is taken out of its body before anything of the body is shown or cut short.
    const unsaid = (said: string) =>
      redactSecrets(said, this.options.key ? [this.options.key] : []);
    if (res.status === 401) {
      // 401 bodies are plain text by design ("invalid API key", "API key revoked", ...).
      const said = oneLine(unsaid(text), 200) || "unauthorized";
      const { key, keyName, baseUrl } = this.options;
      const which = keyName ?? (key ? `the key ${keyPrefix(key)}...` : "the key");
      const status = `HTTP 401${requestIdOf(res)}`;
      // A suspended account is not fixed by a new key, so no login is suggested. A revoked key's
      // advice (make a new key and send it) is for an HTTP client: the CLI's own step follows.
      if (said.startsWith("account suspended"))
        return new GatewayRefusal(
          `the gateway at ${baseUrl} refused ${which}: ${said} (${status})`,
          401,
        );
      return new GatewayRefusal(
        `the gateway at ${baseUrl} refused ${which}: ${refusedKeyReason(said)} (${status}); ${this.options.onUnauthorized ?? `run \`${cliCommand("login")}\``}`,
        401,
      );
    }
    // Every other route the CLI calls exists on every gateway: a 404 is a URL with a path that
    // leads elsewhere (a whole endpoint's URL, a proxy's prefix mistyped), not a missing thing.
    if (res.status === 404 && !notFoundIsAnswer)
      return new GatewayRefusal(
        `no gateway API at ${this.options.baseUrl} (HTTP 404); give --base-url or GATEWAY_BASE_URL the gateway's address, such as ${defaultBaseUrl}, or its /v1 URL`,
        404,
      );
    let message = htmlPage(res, text)
      ? `the server at ${this.options.baseUrl} answered with an HTML page, not a gateway's JSON: is a proxy in front of the gateway failing, or is no Model Gateway there?`
      : oneLine(unsaid(text), 300) || res.statusText;
    let code: string | undefined;
    try {
      const json: unknown = JSON.parse(text);
      const body = schemas.chatStyleError.safeParse(json);
      const oauth = schemas.oauthStyleError.safeParse(json);
      if (body.success) {
        message = oneLine(unsaid(body.data.error.message), 300);
        code = body.data.error.code ? oneLine(unsaid(body.data.error.code), 100) : undefined;
      } else if (oauth.success) {
        message = oneLine(unsaid(oauth.data.error_description), 300);
        code = oneLine(unsaid(oauth.data.error), 100);
      }
    } catch {
      // Not JSON (a plain-text refusal): the text itself is the message.
    }
    const tag = code ? `${res.status} ${code}` : `HTTP ${res.status}`;
    if (res.status === 429)
      return new GatewayRefusal(
        `the gateway is rate limiting this (${tag}): ${message} Wait a minute and try again.`,
        429,
      );
    return new GatewayRefusal(`${message.replace(/\.$/, "")} (${tag})`, res.status);
  }
}

/** What a 401's text says happened to the key, in the CLI's words. */
function refusedKeyReason(said: string): string {
  if (said.startsWith("API key revoked:"))
    return "it was revoked, on the gateway's dashboard or by a logout";
  if (said.startsWith("invalid API key:"))
    return "this gateway has no such key, as when its database was replaced or the key is another gateway's";
  return said;
}

/** `, request req_...` for an answer that carries its id (a gateway's does), to quote in a report. */
function requestIdOf(res: Response): string {
  const id = res.headers.get("x-request-id");
  return id && /^[\w-]{1,100}$/.test(id) ? `, request ${id}` : "";
}

/**
 * What another server wrote, as one line of at most `max` characters: a body may run over lines
 * (a stack trace) or carry control characters that would drive the terminal (`shownText`).
 */
export function oneLine(text: string, max: number): string {
  const chars = Array.from(shownText(text.replace(/\s+/g, " ").trim()));
  return chars.length > max ? `${chars.slice(0, max).join("")}...` : chars.join("");
}

/** An error page for a browser (a proxy's 502, a login wall), which says nothing on one line. */
function htmlPage(res: Response, text: string): boolean {
  return /\btext\/html\b/i.test(res.headers.get("content-type") ?? "") || /^\s*</.test(text);
}

/** OpenSSL's words for a TLS handshake answered by a server that speaks plain HTTP. */
const plainHttpAnswers = new Set([
  "ERR_SSL_WRONG_VERSION_NUMBER",
  "ERR_SSL_PACKET_LENGTH_TOO_LONG",
]);

function answeredWithoutTls(err: unknown): boolean {
  const code = ((err as Error | undefined)?.cause as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && plainHttpAnswers.has(code);
}

/**
 * The connection was taken and closed before a byte came back: what a TLS port does with a plain
 * HTTP request (undici words it "other side closed").
 */
function closedWithoutAnswer(err: unknown): boolean {
  const cause = (err as Error | undefined)?.cause as
    | { code?: unknown; socket?: { bytesRead?: unknown } }
    | undefined;
  return cause?.code === "UND_ERR_SOCKET" && cause.socket?.bytesRead === 0;
}

/** The exchange's bound passed (`AbortSignal.timeout`), before the answer or during its body. */
function timedOut(err: unknown): boolean {
  return err instanceof Error && err.name === "TimeoutError";
}

function seconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}

function networkReason(err: unknown): string {
  // OpenSSL's messages run over lines (a code, a source file); the first is the reason.
  return describeSystemError(err instanceof Error && err.cause ? err.cause : err)
    .split("\n")[0]
    .trim();
}

/** Options every command that talks to the gateway accepts. */
export interface ConnectionOptions {
  baseUrl?: string;
  profile: string;
}

/**
 * The gateway a stored login key goes to: the one that approved it. A --base-url or
 * GATEWAY_BASE_URL naming another one (a typo, a shell left pointing elsewhere) is refused before
 * anything is sent, as gh keeps each host's token to that host.
 */
export function storedKeyGateway(flag: string | undefined, storedBaseUrl: string): string {
  const baseUrl = resolveBaseUrl(flag, storedBaseUrl);
  const own = gatewayRoot(storedBaseUrl, UserError);
  if (own !== baseUrl) {
    throw new UserError(
      `the login key is for ${own}, not ${baseUrl}; run \`${cliCommand(`login --base-url ${baseUrl}`)}\` to log in there (or set GATEWAY_API_KEY)`,
    );
  }
  return own;
}

/** The `gateway login` that logs this profile in to this gateway again. */
function loginAgain(baseUrl: string, profile: string): string {
  return cliCommand(withProfile(`login --base-url ${baseUrl}`, profile));
}

/**
 * Revokes `old`, a login key a newer login of `profile` replaced, on the gateway it came from
 * (nobody holds it any more), best effort. Undefined when done, else the line saying it stays valid.
 */
export async function revokeReplacedLogin(
  client: GatewayClient,
  profile: string,
  old: StoredLogin,
): Promise<string | undefined> {
  try {
    await client.withKey(old.key, old.baseUrl).logout();
    return undefined;
  } catch (e) {
    const refusal = e instanceof GatewayRefusal ? e.status : undefined;
    // A 401: that gateway no longer takes the key, which is what revoking it was for.
    if (refusal === 401) return undefined;
    return `the previous login key ${shownText(old.keyId)} of profile "${profile}" could not be revoked on ${old.baseUrl} (${refusal === undefined ? "not reachable" : `HTTP ${refusal}`}); it stays valid there until revoked in that gateway's dashboard`;
  }
}

/**
 * The profile's older logins that stayed stored beside its newest (`LoginLookup.replaced`): each
 * is revoked as a login replacing it would have revoked it, and removed from its store. One that
 * could not be revoked is said, and removed all the same, as a replaced login is: trying again on
 * every command would hold each one up while that gateway does not answer.
 */
export async function retireReplacedLogins(
  client: GatewayClient,
  profile: string,
  current: StoredLogin,
  replaced: FoundLogin[],
  stderr: TextOutput = process.stderr,
): Promise<void> {
  for (const { login, store } of replaced) {
    // A copy of the key in use (a keychain write that went through after it timed out) is only
    // removed: revoking it would revoke the login itself.
    const copy = login.key === current.key;
    const problem = copy ? undefined : await revokeReplacedLogin(client, profile, login);
    await store.delete(profile).catch(() => false);
    if (problem) note(`gateway: ${problem}`, stderr);
    else if (!copy)
      note(
        `gateway: revoked login key ${shownText(login.keyId)} of profile "${profile}", which a newer login replaced, and removed it from ${store.location}`,
        stderr,
      );
  }
}

/** A client carrying the active key (GATEWAY_API_KEY or the profile's login key). */
export async function connectWithKey(
  opts: ConnectionOptions,
): Promise<{ client: GatewayClient; credential: ActiveCredential }> {
  // A --base-url it cannot use is said before anything else is looked at, as any flag mistake is.
  if (opts.baseUrl !== undefined) resolveBaseUrl(opts.baseUrl);
  const credential = await activeCredential(opts.profile);
  const baseUrl = credential.stored
    ? storedKeyGateway(opts.baseUrl, credential.stored.login.baseUrl)
    : resolveBaseUrl(opts.baseUrl);
  const client = new GatewayClient({
    baseUrl,
    key: credential.key,
    keyName: credential.stored
      ? `the login key ${shownText(credential.stored.login.keyId)} (${keyPrefix(credential.key)}...) of profile "${opts.profile}"`
      : `the key in GATEWAY_API_KEY (${keyPrefix(credential.key)}...)`,
    onUnauthorized: credential.stored
      ? `run \`${loginAgain(baseUrl, opts.profile)}\` again`
      : `check GATEWAY_API_KEY, or unset it to use the key from \`${cliCommand("login")}\``,
  });
  if (credential.stored)
    await retireReplacedLogins(client, opts.profile, credential.stored.login, credential.replaced);
  return { client, credential };
}
