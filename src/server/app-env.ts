import type { AuthInfo } from "./auth.js";

export type AppEnv = { Variables: { auth: AuthInfo } };
