import type { Context, Hono } from "hono";
import type { AppEnv } from "../app-env.js";
import type { Services } from "../services.js";
import { speechRoute, transcriptionRoute } from "./audio.js";
import { countTokensRoute } from "./count-tokens.js";
import { embeddingsRoute } from "./embeddings.js";
import { installFileRoutes } from "./files.js";
import { imageEditsRoute, imagesRoute } from "./images.js";
import { installJobRoutes } from "./jobs.js";

/**
 * Every media endpoint (images and their edits, audio, asynchronous music and video jobs, their
 * files), and the other whole-answer model endpoints: embeddings and token counting.
 */
export function installMediaRoutes(app: Hono<AppEnv>, s: Services): void {
  app.post("/v1/images/generations", imagesRoute(s));
  app.post("/v1/images/edits", imageEditsRoute(s));
  app.post("/v1/embeddings", embeddingsRoute(s));
  app.post("/v1/messages/count_tokens", countTokensRoute(s));
  app.post("/v1/audio/speech", speechRoute(s));
  app.post("/v1/audio/transcriptions", transcriptionRoute(s));
  installJobRoutes(app, s);
  installFileRoutes(app, s);
}

/** An absolute URL on this gateway, as the client reached it. */
export function gatewayUrl(c: Context, path: string): string {
  return `${new URL(c.req.url).origin}${path}`;
}
