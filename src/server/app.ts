import { Hono } from "hono";
import type { AppEnv } from "./app-env.js";
import { requireKey } from "./auth.js";
import { type ErrorStyle, errorResponse, GatewayError } from "./errors.js";
import { bodySizeLimit } from "./http/body-limit.js";
import { openCors, ownOrigin } from "./http/cors.js";
import { installAccountRoutes } from "./routes/account.js";
import { installAdminRoutes } from "./routes/admin.js";
import { installDashboardRoutes } from "./routes/dashboard.js";
import { installMediaRoutes } from "./routes/media.js";
import { modelRoute, modelsRoute } from "./routes/models.js";
import { installPricingRoute } from "./routes/pricing.js";
import type { Services } from "./services.js";

export type RouteInstaller = (app: Hono<AppEnv>, s: Services) => void;

function styleOf(path: string): ErrorStyle {
  return path.startsWith("/v1/messages") ? "messages" : "chat";
}

/** Builds the whole HTTP surface. The binary and the programmatic API only add a listener. */
export function buildApp(s: Services, extraRoutes: RouteInstaller[] = []): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.use("/v1/*", openCors());
  app.use("/api/*", async (c, next) => {
    if (isCrossOrigin(c.req.header("origin"), c.req.header("sec-fetch-site"), ownOrigin(s, c))) {
      return c.text("cross-origin requests are not allowed on /api", 403);
    }
    await next();
  });
  const limit = bodySizeLimit(s.options.bodyLimitBytes);
  app.use("/v1/*", limit);
  app.use("/api/*", limit);

  app.get("/v1/models", modelsRoute(s));
  app.get("/v1/models/:id{.+}", modelRoute(s));
  installPricingRoute(app, s);
  installAdminRoutes(app, s);
  app.use("/v1/*", requireKey(s.store, s.sharedKeys, s.options.now));
  installMediaRoutes(app, s);
  installDashboardRoutes(app, s);
  installAccountRoutes(app, s);
  for (const install of extraRoutes) install(app, s);

  app.notFound((c) => {
    const path = new URL(c.req.url).pathname;
    const route = `${c.req.method} ${path}`;
    return errorResponse(
      new GatewayError(404, "not_found", `No route ${route}.`),
      styleOf(path),
      route,
    );
  });
  app.onError((err, c) => {
    s.ledger.noteStorageFailure(err);
    const path = new URL(c.req.url).pathname;
    return errorResponse(err, styleOf(path), `${c.req.method} ${path}`);
  });
  return app;
}

/** Same-origin and browser-less requests pass; a page on another origin does not. */
function isCrossOrigin(
  origin: string | undefined,
  fetchSite: string | undefined,
  own: string,
): boolean {
  if (fetchSite === "cross-site" || fetchSite === "same-site") return true;
  if (!origin) return false;
  return origin !== own;
}
