import { GatewayError } from "../errors.js";

/**
 * The provider APIs the official SDKs call that the gateway does not serve. A request to one gets
 * a 400 `bad_request` (in the style its caller reads, as any path no row serves) naming the API,
 * the SDK resource that calls it, what to use instead, and where the served routes are listed:
 * an SDK user then learns from the error alone that the method is not there, rather than reading a
 * bare 404 of an unknown path as a typo of their own. Other unknown paths keep that 404.
 */
export interface NotServedApi {
  /** The path and every path below it. */
  prefix: string;
  /** Only these methods (a path whose other methods a row serves); every method when absent. */
  methods?: readonly string[];
  /** What is not served, as a developer knows it: the API and the SDK resources calling it. */
  what: string;
  /** What to do instead, where the gateway has something. */
  instead?: string;
}

const realtime: Omit<NotServedApi, "prefix"> = {
  what: "The Realtime API (the openai SDK's realtime.clientSecrets, realtime.calls)",
  instead:
    "use /v1/chat/completions or /v1/responses (stream: true), and /v1/audio/speech and /v1/audio/transcriptions for speech",
};
const assistants: Omit<NotServedApi, "prefix"> = {
  what: "The Assistants API (the openai SDK's beta.assistants, beta.threads)",
  instead:
    "use /v1/responses with previous_response_id or /v1/conversations, which the gateway keeps",
};
const managedAgents: Omit<NotServedApi, "prefix"> = {
  what: "Hosted agents and their sessions, environments and vaults (the SDKs' beta.agents, beta.sessions, beta.environments, beta.vaults)",
  instead: "run the agent loop in your client against /v1/responses or /v1/messages",
};
const organization: Omit<NotServedApi, "prefix"> = {
  what: "The organization admin API (the SDKs' admin.organization, organization)",
  instead: "the gateway's keys are managed on its dashboard (/dashboard) or with `gateway keys`",
};

export const notServedApis: readonly NotServedApi[] = [
  {
    prefix: "/v1/complete",
    what: "The legacy Text Completions API (the Anthropic SDK's completions.create)",
    instead: "send the prompt as a user message to /v1/messages",
  },
  {
    prefix: "/v1/images/variations",
    what: "Image variations (the openai SDK's images.createVariation)",
    instead: "send the image with a prompt to /v1/images/edits (images.edit)",
  },
  {
    prefix: "/v1/audio/translations",
    what: "Audio translations (the openai SDK's audio.translations)",
    instead: "transcribe with /v1/audio/transcriptions and have a chat model translate the text",
  },
  {
    prefix: "/v1/audio/voices",
    what: "Custom voices (the openai SDK's audio.voices)",
    instead: "/v1/audio/speech speaks with its model's own voices",
  },
  {
    prefix: "/v1/audio/voice_consents",
    what: "Voice consents (the openai SDK's audio.voiceConsents)",
    instead: "/v1/audio/speech speaks with its model's own voices",
  },
  { prefix: "/v1/moderations", what: "The Moderations API (the openai SDK's moderations)" },
  {
    // GET /v1/files/{id} and its content are served: the images the gateway made.
    prefix: "/v1/files",
    what: "The Files API: uploading, listing and deleting files (the openai SDK's files, the Anthropic SDK's files and beta.files)",
    instead:
      "the gateway's /v1/files/{id} only serves the images it made (an image's `url`); send content inline in the request",
  },
  {
    prefix: "/v1/uploads",
    what: "The Uploads API (the openai SDK's uploads)",
    instead: "send content inline in the request",
  },
  {
    prefix: "/v1/batches",
    what: "The Batch API (the openai SDK's batches)",
    instead: "send each request on its own",
  },
  {
    prefix: "/v1/messages/batches",
    what: "The Message Batches API (the Anthropic SDK's messages.batches, beta.messages.batches)",
    instead: "send each request on its own to /v1/messages",
  },
  {
    prefix: "/v1/vector_stores",
    what: "Vector stores (the openai SDK's vectorStores)",
    instead: "/v1/embeddings makes embeddings to keep in a store of your own",
  },
  { prefix: "/v1/fine_tuning", what: "Fine-tuning (the openai SDK's fineTuning)" },
  { prefix: "/v1/evals", what: "Evals (the openai SDK's evals)" },
  {
    prefix: "/v1/containers",
    what: "Containers (the openai SDK's containers)",
    instead: "a code interpreter tool runs where its model's provider runs it, or in your client",
  },
  ...[
    "/v1/realtime/client_secrets",
    "/v1/realtime/calls",
    "/v1/realtime/sessions",
    "/v1/realtime/transcription_sessions",
    "/v1/realtime/translations",
  ].map((prefix) => ({ prefix, ...realtime })),
  {
    prefix: "/v1/live",
    what: "Live sessions (the openai SDK's live)",
    instead: realtime.instead,
  },
  { prefix: "/v1/assistants", ...assistants },
  { prefix: "/v1/threads", ...assistants },
  { prefix: "/v1/chatkit", what: "ChatKit (the openai SDK's beta.chatkit)" },
  ...[
    "/v1/agents",
    "/v1/sessions",
    "/v1/environments",
    "/v1/vaults",
    "/v1/deployments",
    "/v1/deployment_runs",
    "/v1/memory_stores",
    "/v1/dreams",
    "/v1/tunnels",
  ].map((prefix) => ({ prefix, ...managedAgents })),
  { prefix: "/v1/skills", what: "Skills (the SDKs' skills and beta.skills)" },
  {
    prefix: "/v1/webhook_endpoints",
    what: "Webhook endpoints (the openai SDK's webhooks)",
    instead: "the gateway sends no webhooks: poll a job at its own path (GET /v1/videos/{id})",
  },
  {
    prefix: "/v1/webhook_event_types",
    what: "Webhook event types (the openai SDK's webhooks)",
    instead: "the gateway sends no webhooks: poll a job at its own path (GET /v1/videos/{id})",
  },
  { prefix: "/v1/organization", ...organization },
  { prefix: "/v1/organizations", ...organization },
  { prefix: "/v1/user_profiles", ...organization },
  { prefix: "/v1/compliance", ...organization },
  { prefix: "/v1/safety", what: "Safety alerts and cases (the openai SDK's safety)" },
  { prefix: "/v1/decisions", what: "Decisions (the openai SDK's decisions)" },
  {
    prefix: "/v1/content_provenance_checks",
    what: "Content provenance checks (the openai SDK's contentProvenanceChecks)",
  },
  {
    prefix: "/v1/models",
    methods: ["DELETE"],
    what: "Deleting a model (the openai SDK's models.delete)",
    instead: "the gateway's models are those of its config",
  },
];

/** The refusal of `method path`, a request to `api` (its prefix holds the path). */
export function notServedRefusal(api: NotServedApi, method: string, path: string): GatewayError {
  return new GatewayError(
    400,
    "bad_request",
    `${api.what}: not served by this gateway (${method} ${path})${
      api.instead ? `; ${api.instead}` : ""
    }. GET /openapi.json lists the routes it serves.`,
  );
}
