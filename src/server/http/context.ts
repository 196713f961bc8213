import type { Context } from "hono";
import type { KeyWithAccount } from "../../store/types.js";

// What a request's context carries from the checks before its handler (the caller: a key or the
// owner's session; a dashboard form; the body limit), and the type of the handler it reaches.

/** The owner's dashboard session a request came with (access `owner`, `owner-page`). */
export interface OwnerSession {
  accountId: string;
  /** Hash of the cookie value: identifies the session without holding the secret. */
  id: string;
  /** Bound to this session: derived from the cookie value, so it cannot be used with another one. */
  csrfToken: string;
}

/** The caller a key check found. */
export interface AuthInfo {
  key: KeyWithAccount;
  accountId: string;
}

/** A route's body limit, which every body reader enforces. */
export interface BodyLimit {
  bytes: number;
  /** The refusal, in the style of the routes it guards. */
  tooLarge: () => Error;
}

/** What the registration learns before a handler runs, set only for the routes that need it. */
export type AppEnv = {
  Variables: {
    /** The caller's key (access `key`, `any-key`, `login`). */
    auth: AuthInfo;
    /** The owner's dashboard session (access `owner`, `owner-page`). */
    owner: OwnerSession;
    /** A dashboard form, read and CSRF-checked (access `owner-page`, POST). */
    form: Record<string, unknown>;
    /** The route's body limit, which every body reader enforces. */
    bodyLimit: BodyLimit;
  };
};

/** What serves a route, with the context its checks filled. */
export type Handler = (c: Context<AppEnv>) => Response | Promise<Response>;
