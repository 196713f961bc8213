import type { Context, Hono } from "hono";
import type { AppEnv } from "../app-env.js";
import type { Services } from "../services.js";
import { speechRoute, transcriptionRoute } from "./audio.js";
import { installFileRoutes } from "./files.js";
import { imagesRoute } from "./images.js";
import { installJobRoutes } from "./jobs.js";

/** Every media endpoint: images, audio, asynchronous music and video jobs, and their files. */
export function installMediaRoutes(app: Hono<AppEnv>, s: Services): void {
  app.post("/v1/images/generations", imagesRoute(s));
  app.post("/v1/audio/speech", speechRoute(s));
  app.post("/v1/audio/transcriptions", transcriptionRoute(s));
  installJobRoutes(app, s);
  installFileRoutes(app, s);
}

/** An absolute URL on this gateway, as the client reached it. */
export function gatewayUrl(c: Context, path: string): string {
  return `${new URL(c.req.url).origin}${path}`;
}
