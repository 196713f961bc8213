import type { ZodType } from "zod";
import type { Services } from "../compose/services.js";
import { dashboardScriptPath } from "../dashboard/pages.js";
import { PlainTextError } from "../errors.js";
import { apiBodyLimit } from "../http/body.js";
import type { Handler } from "../http/context.js";
import { preflight } from "../http/cors.js";
import type { Loopback } from "../http/loopback.js";
import type {
  Access,
  Method,
  Route,
  RouteErrorStyle,
  Surface,
  Unmatched,
} from "../http/route-row.js";
import { jobCollections, jobKinds } from "../jobs/job-kinds.js";
import type { Readiness } from "../observe/health.js";
import type { GatewayMetrics } from "../observe/metrics.js";
import type { MetricsAccess } from "../observe/metrics-access.js";
import { completionHandler, textCompletionHandler } from "./completions.js";
import { healthHandlers, metricsHandler } from "./health.js";
import { modelHandler, modelsHandler } from "./models.js";
import { websocketModeRefused } from "./websockets.js";

/**
 * Every route the gateway serves, one row each: method, path, who may call it (`Access` in
 * http/route-row.ts), the style of its errors, and its handler. `gatewayListener` (app.ts) registers
 * each row as a single handler that first does what the row's part of the surface asks
 * (`surfaces`), then checks its access, then runs the handler, and renders any error in the row's
 * style. A path no row serves is answered by `unmatched`.
 */

/** Dashboard forms are a few short fields. */
const formBodyLimitBytes = 16 * 1024;

/**
 * A route anyone may call reads at most this: a device-code request is one short field, and a
 * caller without a key must not make the gateway hold megabytes.
 */
export const publicBodyLimitBytes = 8 * 1024;

/** The parts of the surface, by path prefix; a path under none (health, landing) has no checks. */
export function surfaces(bodyLimitBytes: number): Surface[] {
  const api = apiBodyLimit(bodyLimitBytes);
  const publicApi = apiBodyLimit(Math.min(bodyLimitBytes, publicBodyLimitBytes));
  return [
    // The model API: called from any origin, so every answer carries the CORS headers.
    { prefix: "/v1", cors: true, sameOrigin: false, bodyLimit: api, publicBodyLimit: publicApi },
    // The MCP server: the model API as tools, on the same keys, so the same rules.
    { prefix: "/mcp", cors: true, sameOrigin: false, bodyLimit: api, publicBodyLimit: publicApi },
    // The JSON API of the tools and the dashboard's scripts: never from another origin's page.
    { prefix: "/api", cors: false, sameOrigin: true, bodyLimit: api, publicBodyLimit: publicApi },
    {
      prefix: "/dashboard",
      cors: false,
      sameOrigin: false,
      bodyLimit: {
        bytes: formBodyLimitBytes,
        tooLarge: () => new PlainTextError(413, "form too large", "bad_request"),
      },
    },
  ];
}

/**
 * What a path no row serves answers: a 404 once its caller passed `access`, as the rows of its part
 * ask (an unknown /v1 path needs a key). The first prefix that holds wins.
 */
export const unmatched: Unmatched[] = [
  { prefix: "/v1/messages", access: "key", errors: "messages" },
  { prefix: "/v1", access: "key", errors: "chat" },
  { prefix: "/mcp", access: "key", errors: "jsonrpc" },
  { prefix: "/api/admin", access: "admin", errors: "chat" },
  { prefix: "/api", access: "public", errors: "chat" },
  // An address the owner's browser opens (a typo, an old bookmark): the dashboard's page, a way back.
  { prefix: "/dashboard", access: "public", errors: "chat", page: true },
  { prefix: "", access: "public", errors: "chat" },
];

export interface TableOptions {
  readiness: Readiness;
  /** Absent when the `metrics` option is off (then so is the route). */
  metrics: GatewayMetrics | undefined;
  metricsAccess: MetricsAccess;
  /** Requests to the gateway's own listener, which the MCP server's tool calls are. */
  loopback: Loopback;
  /** Routes a test adds (`startGateway({ extraRoutes })`), registered like every other. */
  extra?: readonly Route[];
}

const route = (
  method: Method,
  path: string,
  access: Access,
  errors: RouteErrorStyle,
  handler: Handler,
  body?: () => Promise<ZodType>,
): Route => ({ method, path, access, errors, handler, body });

/** A row whose method is answered with why it is not served (`Route.refusesOnly`). */
const refusing = (row: Route): Route => ({ ...row, refusesOnly: true });

/** A route's body schema, from its module when `/openapi.json` first asks (the module may be lazy). */
const schema =
  <M>(load: () => Promise<M>, pick: (module: M) => ZodType) =>
  async () =>
    pick(await load());
const completionsModule = () => import("./completions.js");
const requestsQuery = schema(
  () => import("./account.js"),
  (m) => m.requestsQuery,
);
const usageDaysQuery = schema(
  () => import("./account.js"),
  (m) => m.usageDaysQuery,
);
const jobsModule = () => import("./jobs.js");
const jobsQuery = schema(jobsModule, (m) => m.jobsQuery);

export function routeTable(services: Services, options: TableOptions): Route[] {
  const { music, video, video_extension: extension } = jobKinds;
  const { videos } = jobCollections;
  // One set of device codes for the device flow and the dashboard's approval page.
  const devices = once(async () => {
    const { DeviceCodes } = await import("../auth/device-codes.js");
    const { defaultDeviceCodeTtlSeconds, defaultDevicePollIntervalSeconds } = await import(
      "./dashboard.js"
    );
    return new DeviceCodes(
      services.repos.deviceCodes,
      {
        ttlSeconds: services.options.deviceCodeTtlSeconds ?? defaultDeviceCodeTtlSeconds,
        intervalSeconds:
          services.options.devicePollIntervalSeconds ?? defaultDevicePollIntervalSeconds,
      },
      services.limits,
    );
  });
  const account = lazyHandlers(async () => {
    const { quotaHandler, usageHandler, usageViews } = await import("./account.js");
    const usage = usageViews(services);
    return {
      quota: quotaHandler(services),
      summary: usageHandler(usage.summary, services),
      daily: usageHandler(usage.daily, services),
      requests: usageHandler(usage.requests, services),
    };
  });
  const countTokens = onFirstRequest(async () =>
    (await import("./count-tokens.js")).countTokensHandler(services),
  );
  const inputTokens = onFirstRequest(async () =>
    (await import("./count-tokens.js")).responsesInputTokensHandler(services),
  );
  const embeddings = onFirstRequest(async () =>
    (await import("./embeddings.js")).embeddingsHandler(services),
  );
  const media = lazyHandlers(async () => {
    const { imageEditsHandler, imagesHandler } = await import("./images.js");
    const { speechHandler, transcriptionHandler } = await import("./audio.js");
    return {
      images: imagesHandler(services),
      imageEdits: imageEditsHandler(services),
      speech: speechHandler(services),
      transcription: transcriptionHandler(services),
    };
  });
  const files = onFirstRequest(async () => (await import("./files.js")).fileHandler(services));
  const stored = lazyHandlers(async () =>
    (await import("./responses-state.js")).responseHandlers(services),
  );
  const storedChat = onFirstRequest(
    async () => (await import("./chat-stored.js")).storedChatRefused,
  );
  const compact = onFirstRequest(async () =>
    (await import("./responses-compact.js")).compactHandler(services),
  );
  const conversations = lazyHandlers(async () =>
    (await import("./conversations.js")).conversationHandlers(services),
  );
  const jobs = lazyHandlers(async () => {
    const handlers = (await import("./jobs.js")).jobHandlers(services);
    const of = jobCollections;
    return {
      ...handlers,
      musicList: handlers.list(of.music),
      music: handlers.poll(of.music),
      musicContent: handlers.content(of.music),
      musicRemove: handlers.remove(of.music),
      videoList: handlers.list(of.video),
      video: handlers.poll(of.video),
      videoContent: handlers.content(of.video),
      videoRemove: handlers.remove(of.video),
      extensionList: handlers.list(of.extension),
      extension: handlers.poll(of.extension),
      extensionContent: handlers.content(of.extension),
      extensionRemove: handlers.remove(of.extension),
      videosList: handlers.list(of.videos),
      videos: handlers.poll(of.videos),
      videosContent: handlers.content(of.videos),
      videosRemove: handlers.remove(of.videos),
    };
  });
  const admin = lazyHandlers(async () => (await import("./admin.js")).adminHandlers(services));
  const kit = lazyHandlers(async () =>
    (await import("./admin-kit.js")).kitHandlers({
      mockScript: services.mockScript,
      clock: services.options.clock,
    }),
  );
  const pricing = onFirstRequest(async () =>
    (await import("./pricing.js")).pricingHandler(services.store),
  );
  const device = lazyHandlers(async () =>
    (await import("./device-auth.js")).deviceAuthHandlers(await devices(), services.options),
  );
  const toolKeys = lazyHandlers(async () =>
    (await import("./tool-keys.js")).toolKeyHandlers(services),
  );
  const ownerKeys = lazyHandlers(async () =>
    (await import("./tool-keys.js")).dashboardKeyHandlers(services),
  );
  const owner = lazyHandlers(async () => {
    const { dashboardAccountHandlers } = await import("./dashboard-account.js");
    const { usageViews } = await import("./account.js");
    const handlers = dashboardAccountHandlers(services);
    const usage = usageViews(services);
    return {
      ...handlers,
      summary: handlers.usage(usage.summary),
      daily: handlers.usage(usage.daily),
      requests: handlers.usage(usage.requests),
    };
  });
  const pages = lazyHandlers(async () =>
    (await import("./dashboard.js")).dashboardHandlers(services, await devices()),
  );
  const mcp = onFirstRequest(async () =>
    (await import("./mcp.js")).mcpHandler(services, options.loopback),
  );
  const mcpStateless = onFirstRequest(async () => (await import("./mcp.js")).mcpMethodNotAllowed);
  const landing = onFirstRequest(async () => (await import("./landing.js")).landingHandler);
  const openApi = onFirstRequest(async () =>
    (await import("./openapi.js")).openApiHandler(() => table),
  );
  const health = healthHandlers(options.readiness);

  const textCompletions = textCompletionHandler(services);
  const table: Route[] = [
    // ---- the model API (/v1)
    route("OPTIONS", "/v1/*", "public", "chat", preflight),
    route(
      "GET",
      "/v1/models",
      "public",
      "chat",
      modelsHandler(services.store, services.options.runAdminKeys),
    ),
    route(
      "GET",
      "/v1/models/:id{.+}",
      "public",
      "chat",
      modelHandler(services.store, services.options.runAdminKeys),
    ),
    route(
      "POST",
      "/v1/chat/completions",
      "key",
      "chat",
      completionHandler(services, "chat"),
      schema(completionsModule, (m) => m.chatBody),
    ),
    route(
      "POST",
      "/v1/completions",
      "key",
      "chat",
      textCompletions,
      schema(completionsModule, (m) => m.completionsBody),
    ),
    // Continue's `deepseek` provider posts its fill-in-the-middle to `{apiBase}beta/completions`
    // (DeepSeek's beta path): with the gateway's `/v1/` as apiBase, this one.
    route(
      "POST",
      "/v1/beta/completions",
      "key",
      "chat",
      textCompletions,
      schema(completionsModule, (m) => m.completionsBody),
    ),
    route("GET", "/v1/chat/completions", "key", "chat", storedChat),
    route("GET", "/v1/chat/completions/:id", "key", "chat", storedChat),
    route("POST", "/v1/chat/completions/:id", "key", "chat", storedChat),
    route("DELETE", "/v1/chat/completions/:id", "key", "chat", storedChat),
    route("GET", "/v1/chat/completions/:id/messages", "key", "chat", storedChat),
    route(
      "POST",
      "/v1/messages",
      "key",
      "messages",
      completionHandler(services, "messages"),
      schema(completionsModule, (m) => m.messagesBody),
    ),
    route(
      "POST",
      "/v1/responses",
      "key",
      "chat",
      completionHandler(services, "responses"),
      schema(completionsModule, (m) => m.responsesBody),
    ),
    route("POST", "/v1/responses/input_tokens", "key", "chat", inputTokens),
    refusing(
      route(
        "GET",
        "/v1/responses",
        "key",
        "chat",
        websocketModeRefused(
          "The Responses API",
          "send each response.create as POST /v1/responses, with stream: true for its events.",
        ),
      ),
    ),
    refusing(
      route(
        "GET",
        "/v1/realtime",
        "key",
        "chat",
        websocketModeRefused(
          "The Realtime API",
          "use /v1/chat/completions or /v1/responses (stream: true), and /v1/audio for speech.",
        ),
      ),
    ),
    route("POST", "/v1/responses/compact", "key", "chat", compact),
    route("POST", "/v1/responses/:id/cancel", "key", "chat", stored("cancel")),
    route("GET", "/v1/responses/:id", "key", "chat", stored("retrieve")),
    route("DELETE", "/v1/responses/:id", "key", "chat", stored("remove")),
    route("GET", "/v1/responses/:id/input_items", "key", "chat", stored("inputItems")),
    route("POST", "/v1/conversations", "key", "chat", conversations("create")),
    route("GET", "/v1/conversations/:id", "key", "chat", conversations("retrieve")),
    route("POST", "/v1/conversations/:id", "key", "chat", conversations("update")),
    route("DELETE", "/v1/conversations/:id", "key", "chat", conversations("remove")),
    route("GET", "/v1/conversations/:id/items", "key", "chat", conversations("listItems")),
    route("POST", "/v1/conversations/:id/items", "key", "chat", conversations("addItems")),
    route(
      "GET",
      "/v1/conversations/:id/items/:itemId",
      "key",
      "chat",
      conversations("retrieveItem"),
    ),
    route(
      "DELETE",
      "/v1/conversations/:id/items/:itemId",
      "key",
      "chat",
      conversations("removeItem"),
    ),
    route("POST", "/v1/messages/count_tokens", "key", "messages", countTokens),
    route(
      "POST",
      "/v1/embeddings",
      "key",
      "chat",
      embeddings,
      schema(
        () => import("./embeddings.js"),
        (m) => m.embeddingBody,
      ),
    ),
    route(
      "POST",
      "/v1/images/generations",
      "key",
      "chat",
      media("images"),
      schema(
        () => import("./images.js"),
        (m) => m.imageBody,
      ),
    ),
    route("POST", "/v1/images/edits", "key", "chat", media("imageEdits")),
    route(
      "POST",
      "/v1/audio/speech",
      "key",
      "chat",
      media("speech"),
      schema(
        () => import("./audio.js"),
        (m) => m.speechBody,
      ),
    ),
    route("POST", "/v1/audio/transcriptions", "key", "chat", media("transcription")),
    route(
      "POST",
      music.path,
      "key",
      "chat",
      jobs("submitMusic"),
      schema(jobsModule, (m) => m.musicBody),
    ),
    { ...route("GET", music.path, "key", "chat", jobs("musicList")), query: jobsQuery },
    route("GET", `${music.path}/:id`, "key", "chat", jobs("music")),
    route("GET", `${music.path}/:id/content`, "key", "chat", jobs("musicContent")),
    route("DELETE", `${music.path}/:id`, "key", "chat", jobs("musicRemove")),
    route(
      "POST",
      video.path,
      "key",
      "chat",
      jobs("submitVideo"),
      schema(jobsModule, (m) => m.videoBody),
    ),
    { ...route("GET", video.path, "key", "chat", jobs("videoList")), query: jobsQuery },
    route("GET", `${video.path}/:id`, "key", "chat", jobs("video")),
    route("GET", `${video.path}/:id/content`, "key", "chat", jobs("videoContent")),
    route("DELETE", `${video.path}/:id`, "key", "chat", jobs("videoRemove")),
    route(
      "POST",
      extension.path,
      "key",
      "chat",
      jobs("submitExtension"),
      schema(jobsModule, (m) => m.extensionBody),
    ),
    { ...route("GET", extension.path, "key", "chat", jobs("extensionList")), query: jobsQuery },
    route("GET", `${extension.path}/:id`, "key", "chat", jobs("extension")),
    route("GET", `${extension.path}/:id/content`, "key", "chat", jobs("extensionContent")),
    route("DELETE", `${extension.path}/:id`, "key", "chat", jobs("extensionRemove")),
    // OpenAI's video API over both kinds of video job; its static paths above come first, and
    // the characters' path before `/:id/content`, which `characters/content` would also match.
    route(
      "POST",
      videos.path,
      "key",
      "chat",
      jobs("createVideo"),
      schema(jobsModule, (m) => m.openaiVideoBody),
    ),
    route("POST", `${videos.path}/edits`, "key", "chat", jobs("editRefused")),
    route("POST", `${videos.path}/characters`, "key", "chat", jobs("charactersRefused")),
    route("GET", `${videos.path}/characters/:id`, "key", "chat", jobs("charactersRefused")),
    route(
      "POST",
      `${videos.path}/:id/remix`,
      "key",
      "chat",
      jobs("remix"),
      schema(jobsModule, (m) => m.remixBody),
    ),
    { ...route("GET", videos.path, "key", "chat", jobs("videosList")), query: jobsQuery },
    route("GET", `${videos.path}/:id`, "key", "chat", jobs("videos")),
    route("GET", `${videos.path}/:id/content`, "key", "chat", jobs("videosContent")),
    route("DELETE", `${videos.path}/:id`, "key", "chat", jobs("videosRemove")),
    route("GET", "/v1/files/:id", "key", "client", files),
    route("GET", "/v1/files/:id/content", "key", "client", files),
    route("GET", "/v1/account/quota", "key", "chat", account("quota")),
    {
      ...route("GET", "/v1/usage/summary", "key", "chat", account("summary")),
      query: usageDaysQuery,
    },
    { ...route("GET", "/v1/usage/daily", "key", "chat", account("daily")), query: usageDaysQuery },
    {
      ...route("GET", "/v1/usage/requests", "key", "chat", account("requests")),
      query: requestsQuery,
    },

    // ---- the MCP server (/mcp): each tool call is its /v1 twin, sent through this table again
    route("OPTIONS", "/mcp", "public", "jsonrpc", preflight),
    // Its handler counts a shared key's address: by the requests in the body, not by the POST.
    route("POST", "/mcp", "any-key", "jsonrpc", mcp),
    refusing(route("GET", "/mcp", "key", "jsonrpc", mcpStateless)),
    refusing(route("DELETE", "/mcp", "key", "jsonrpc", mcpStateless)),

    // ---- the JSON API (/api)
    route("GET", "/api/public/pricing", "public", "chat", pricing),
    route("GET", "/api/admin/requests", "admin", "chat", admin("requests")),
    route("GET", "/api/admin/accounts", "admin", "chat", admin("accounts")),
    route("POST", "/api/admin/accounts", "admin", "chat", admin("createAccount")),
    route("GET", "/api/admin/accounts/:id", "admin", "chat", admin("account")),
    route("PATCH", "/api/admin/accounts/:id", "admin", "chat", admin("patchAccount")),
    route("POST", "/api/admin/accounts/:id/topup", "admin", "chat", admin("topUp")),
    route("POST", "/api/admin/accounts/:id/suspend", "admin", "chat", admin("suspend")),
    route("POST", "/api/admin/accounts/:id/reinstate", "admin", "chat", admin("reinstate")),
    route("POST", "/api/admin/accounts/:id/keys", "admin", "chat", admin("createKey")),
    route("DELETE", "/api/admin/keys/:keyId", "admin", "chat", admin("revokeKey")),
    route("GET", "/api/admin/accounts/:id/byok", "admin", "chat", admin("byok")),
    route("POST", "/api/admin/accounts/:id/byok", "admin", "chat", admin("addByok")),
    route("DELETE", "/api/admin/accounts/:id/byok/:byokId", "admin", "chat", admin("deleteByok")),
    route("GET", "/api/admin/mock/script", "admin", "chat", kit("script")),
    route("POST", "/api/admin/mock/script", "admin", "chat", kit("addScript")),
    route("DELETE", "/api/admin/mock/script", "admin", "chat", kit("resetScript")),
    route(
      "POST",
      "/api/admin/clock",
      "admin",
      "chat",
      kit("setClock"),
      schema(
        () => import("./admin-kit.js"),
        (m) => m.clockBody,
      ),
    ),
    // The device flow (RFC 8628) answers its own refusals in OAuth's shape.
    route("POST", "/api/auth/device/code", "public", "chat", device("code")),
    route("POST", "/api/auth/device/token", "public", "chat", device("token")),
    route("POST", "/api/auth/device/cancel", "public", "chat", device("cancel")),
    route("GET", "/api/auth/whoami", "any-key", "chat", toolKeys("whoami")),
    route("POST", "/api/auth/logout", "login", "chat", toolKeys("logout")),
    route(
      "POST",
      "/api/keys",
      "login",
      "chat",
      toolKeys("create"),
      schema(
        () => import("./tool-keys.js"),
        (m) => m.createKeyBody,
      ),
    ),
    route("GET", "/api/keys", "login", "chat", toolKeys("list")),
    route("DELETE", "/api/keys/:idOrLabel", "login", "chat", toolKeys("revoke")),
    route("GET", "/api/dashboard/keys", "owner", "chat", ownerKeys("list")),
    route("POST", "/api/dashboard/keys", "owner", "chat", ownerKeys("create")),
    route("DELETE", "/api/dashboard/keys/:idOrLabel", "owner", "chat", ownerKeys("revoke")),
    route("GET", "/api/dashboard/account", "owner", "chat", owner("account")),
    route("GET", "/api/dashboard/byok", "owner", "chat", owner("byok")),
    route("POST", "/api/dashboard/byok", "owner", "chat", owner("addByok")),
    route("DELETE", "/api/dashboard/byok/:id", "owner", "chat", owner("deleteByok")),
    route("PUT", "/api/dashboard/payg", "owner", "chat", owner("payg")),
    {
      ...route("GET", "/api/dashboard/usage/summary", "owner", "chat", owner("summary")),
      query: usageDaysQuery,
    },
    {
      ...route("GET", "/api/dashboard/usage/daily", "owner", "chat", owner("daily")),
      query: usageDaysQuery,
    },
    {
      ...route("GET", "/api/dashboard/usage/requests", "owner", "chat", owner("requests")),
      query: requestsQuery,
    },

    // ---- the owner's pages (/dashboard)
    route("GET", "/dashboard/login", "public", "chat", pages("login")),
    route("GET", dashboardScriptPath, "public", "chat", pages("script")),
    route("GET", "/dashboard", "owner-page", "chat", pages("home")),
    route("POST", "/dashboard/keys", "owner-page", "chat", pages("createKey")),
    route("POST", "/dashboard/keys/:id/revoke", "owner-page", "chat", pages("revokeKey")),
    route("POST", "/dashboard/byok", "owner-page", "chat", pages("addByok")),
    route("POST", "/dashboard/byok/:id/remove", "owner-page", "chat", pages("removeByok")),
    route("POST", "/dashboard/payg", "owner-page", "chat", pages("payg")),
    route("GET", "/dashboard/requests/:id", "owner-page", "chat", pages("request")),
    route("POST", "/dashboard/logout", "owner-page", "chat", pages("logout")),
    route("GET", "/dashboard/device", "owner-page", "chat", pages("device")),
    route("POST", "/dashboard/device/approve", "owner-page", "chat", pages("approve")),
    route("POST", "/dashboard/device/deny", "owner-page", "chat", pages("deny")),

    // ---- the rest
    route("GET", "/", "public", "chat", landing),
    route("GET", "/openapi.json", "public", "chat", openApi),
    route("GET", "/health", "public", "chat", health.live),
    route("GET", "/health/ready", "public", "chat", health.ready),
    ...(options.metrics
      ? [
          route(
            "GET",
            "/metrics",
            options.metricsAccess === "admin" ? "admin" : "public",
            "chat",
            metricsHandler(options.metrics),
          ),
        ]
      : []),
    ...(options.extra ?? []),
  ];
  return table;
}

/**
 * Handlers built on the first request to any of their rows, once for all of them (one module's
 * handlers may share state: a page's flash, the device codes). A gateway serving the model API
 * may never need the dashboard, the admin and device APIs, media or jobs: their modules, schemas
 * and pages are not loaded at start and take memory only once used.
 */
function lazyHandlers<Handlers extends object>(
  build: () => Promise<Handlers>,
): (name: HandlerName<Handlers>) => Handler {
  const built = once(build);
  return (name) => onFirstRequest(async () => (await built())[name] as Handler);
}

type HandlerName<Handlers> = {
  [Name in keyof Handlers]: Handlers[Name] extends Handler ? Name : never;
}[keyof Handlers];

/** A handler built on its first request and kept for the ones after it. */
function onFirstRequest(build: () => Promise<Handler>): Handler {
  let handler: Handler | undefined;
  const built = once(async () => {
    handler = await build();
    return handler;
  });
  return (c) => (handler ? handler(c) : built().then((ready) => ready(c)));
}

/** Runs `load` on the first call; every call gets its one promise. */
function once<Value>(load: () => Promise<Value>): () => Promise<Value> {
  let loading: Promise<Value> | undefined;
  return () => {
    loading ??= load();
    return loading;
  };
}
