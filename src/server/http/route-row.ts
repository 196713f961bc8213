import type { ZodType } from "zod";
import type { ErrorStyle } from "../errors.js";
import type { BodyLimit, Handler } from "./context.js";

/**
 * Who may call a route; the registration checks it before the handler runs.
 *   public      anyone
 *   key         a gateway key; a shared key also within its per-address limit (the /v1 callers)
 *   any-key     any gateway key, no per-address limit at the door: who am I, and POST /mcp, whose
 *               handler counts a shared key's address by the JSON-RPC requests of each POST
 *   login       the login key of `gateway login`, not one it minted
 *   admin       an admin key
 *   owner       the owner's dashboard session; a write also needs its CSRF token in x-csrf-token
 *   owner-page  the same for the dashboard's pages: a GET without a session gets the sign-in page,
 *               a POST is a form checked for session, same origin and CSRF token, each refusal a page
 */
export type Access = "public" | "key" | "any-key" | "login" | "admin" | "owner" | "owner-page";

/**
 * The methods the rows serve a path with, by one rule for every answer that names them: `takes`,
 * those a client would send (rows that only refuse, and a preflight's OPTIONS, aside), and `allow`,
 * the `Allow` header (HEAD with GET, and OPTIONS where a preflight is answered); "" for none.
 */
export type MethodsTaken = (path: string) => { takes: string[]; allow: string };

/** The methods a row may serve (HEAD is served by a GET row). */
export const routeMethods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;

export type Method = (typeof routeMethods)[number];

/**
 * The JSON style of a route's errors; `client` for a route both SDK families call (`/v1/files`):
 * the chat style, or the messages style for a caller that names `anthropic-version`, as the
 * Anthropic SDKs do on every call and read their errors in.
 */
export type RouteErrorStyle = ErrorStyle | "client";

/** One row of the route table (`routes/index.ts`). */
export interface Route {
  method: Method;
  path: string;
  access: Access;
  /** The JSON style of the route's errors (401s and other refusals before the API are plain text). */
  errors: RouteErrorStyle;
  handler: Handler;
  /** The zod schema of its JSON body, loaded when asked (`GET /openapi.json` describes it). */
  body?: () => Promise<ZodType>;
  /** The zod object schema of its query parameters, loaded when asked (the same). */
  query?: () => Promise<ZodType>;
  /**
   * The row only says why its method is not served here (a WebSocket mode, a stream a stateless
   * MCP server does not open): its method is not among those its path takes (`Allow`).
   */
  refusesOnly?: true;
}

/**
 * A part of the surface (`surfaces` in routes/index.ts): what the registration does for every
 * route under `prefix` (the prefix itself and the paths below it) before its access check.
 */
export interface Surface {
  prefix: string;
  /** The spec's CORS headers on every answer, errors included (the /v1 API). */
  cors: boolean;
  /** A request from a page of another origin is refused (plain 403). */
  sameOrigin: boolean;
  bodyLimit?: BodyLimit;
  /** The limit of its routes anyone may call (access `public`), when smaller than `bodyLimit`. */
  publicBodyLimit?: BodyLimit;
}

/**
 * What a path no route serves answers under `prefix`: 404 once `access` passed, in `errors` style,
 * or for an address a browser opens (`page`) as a page.
 */
export interface Unmatched {
  prefix: string;
  access: Access;
  errors: ErrorStyle;
  page?: boolean;
}
