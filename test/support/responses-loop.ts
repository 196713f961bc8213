import OpenAI from "openai";
import type { Tool } from "openai/resources/responses/responses";
import { afterAll, beforeAll, beforeEach } from "vitest";
import { fakeGemini, geminiJson, geminiStreamSteps } from "./fake-gemini.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "./fake-upstream.js";
import { baseConfigWith, KEY, type TestGateway, testGateway } from "./gateway.js";
import {
  anthropicLoop,
  CLAUDE_MAX_OUTPUT,
  GEMINI_MAX_OUTPUT,
  GPT_MAX_OUTPUT,
  geminiLoop,
  loopDatabase,
  openaiLoop,
  WEATHER_ARGS,
  WEATHER_TOOL,
} from "./tool-loop.js";

/**
 * A gateway with one model on each wire the Responses API can be served on, behind fakes that
 * keep nothing the real APIs would not and refuse what they refuse (a tool result with no call
 * before it): `gpt-x` (chat completions), `claude-x` (anthropic), `gpt-native` (a provider with
 * its own Responses API, which holds its own responses; `gpt-native-keys` is the same API behind
 * a pool of two keys of different projects), `gemini-x` (Google's Gemini API). Each fake answers from the whole
 * conversation it was sent: "My name is Ada" is remembered only if the turn carrying it arrived,
 * and a tool loop is answered as tool-loop.ts does. The gateway's clock is manual, for expiry.
 */

export const OTHER_KEY = "kn-test-other-account-key-000000";

/** The weather function as a Responses client declares it (strict, as the Agents SDK does). */
export const weatherTool: Tool = {
  type: "function",
  name: WEATHER_TOOL,
  description: "The weather in a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  },
  strict: true,
};
export const wireModels = ["gpt-x", "claude-x", "gpt-native", "gemini-x"] as const;
export type WireModel = (typeof wireModels)[number];

type Json = Record<string, unknown>;
const isRecord = (v: unknown): v is Json => typeof v === "object" && v !== null;

/** The texts of a message's content on any of the three wires (consecutive turns may be merged). */
function textsOf(content: unknown): string[] {
  if (typeof content === "string") return [content];
  if (!Array.isArray(content)) return [];
  return content
    .filter(isRecord)
    .filter((part) => ["text", "input_text", "output_text"].includes(String(part.type)))
    .map((part) => String(part.text));
}

/** What the user said, oldest first, in the conversation the fake was sent. */
function userTexts(req: RecordedRequest): string[] {
  if (Array.isArray(req.body.contents)) {
    return (req.body.contents as Json[])
      .filter((content) => content.role === "user")
      .flatMap((content) => (content.parts as Json[]).map((part) => part.text))
      .filter((text): text is string => typeof text === "string" && text !== "");
  }
  const turns = req.items ?? (req.body.messages as Json[] | undefined) ?? [];
  return turns
    .filter((turn) => turn.role === "user" && (turn.type ?? "message") === "message")
    .flatMap((turn) => textsOf(turn.content))
    .filter((text) => text !== "");
}

/** The fakes' memory: a name said in an earlier turn is known only if that turn was sent. */
export function recallReply(req: RecordedRequest): string {
  const said = userTexts(req);
  const last = said.at(-1) ?? "";
  const named = /my name is (\w+)/i;
  const introduced = named.exec(last);
  if (introduced) return `Nice to meet you, ${introduced[1]}.`;
  if (/what is my name/i.test(last)) {
    const earlier = said.map((text) => named.exec(text)).find((m) => m !== null);
    return earlier ? `Your name is ${earlier[1]}.` : "I do not know your name.";
  }
  return `You said: ${last}`;
}

const hasTools = (req: RecordedRequest) =>
  Array.isArray(req.body.tools) && (req.body.tools as unknown[]).length > 0;

function chatFake(req: RecordedRequest): Reply {
  if (hasTools(req)) return openaiLoop(req);
  const text = recallReply(req);
  return req.body.stream === true
    ? { kind: "sse", steps: openaiStreamSteps([text]) }
    : openaiJson(text);
}

function anthropicFake(req: RecordedRequest): Reply {
  if (hasTools(req)) return anthropicLoop(req);
  const text = recallReply(req);
  return req.body.stream === true
    ? { kind: "sse", steps: anthropicStreamSteps([text]) }
    : anthropicJson(text);
}

function geminiFake(req: RecordedRequest): Reply {
  if (hasTools(req)) return geminiLoop(req);
  const text = recallReply(req);
  return req.path.includes(":streamGenerateContent")
    ? { kind: "sse", steps: geminiStreamSteps([text]) }
    : geminiJson(text);
}

let nativeReplies = 0;

/** A provider's own Responses API: it answers from the chain it holds and the new input. */
export function nativeFake(req: RecordedRequest): Reply {
  const n = ++nativeReplies;
  const items = req.items ?? [];
  const last = items.at(-1);
  let output: Json[];
  if (hasTools(req) && last?.type !== "function_call_output") {
    output = [
      {
        type: "function_call",
        id: `fc_native_${n}`,
        call_id: `call_native_${n}`,
        name: WEATHER_TOOL,
        arguments: JSON.stringify(WEATHER_ARGS),
        status: "completed",
      },
    ];
  } else {
    const text =
      last?.type === "function_call_output"
        ? `The weather in Jakarta: ${String(last.output)}.`
        : recallReply(req);
    output = [
      {
        type: "message",
        id: `msg_native_${n}`,
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text, annotations: [] }],
      },
    ];
  }
  const response = {
    id: `resp_native_${n}`,
    object: "response",
    created_at: 1_700_000_000,
    status: "completed",
    model: String(req.body.model),
    output,
    previous_response_id: req.body.previous_response_id ?? null,
    store: req.body.store !== false,
    usage: {
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 6,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 18,
    },
  };
  if (req.body.stream !== true) return { kind: "json", body: response };
  const events: [string, Json][] = [
    ["response.created", { response: { ...response, status: "in_progress", output: [] } }],
    ...output.flatMap((item, i): [string, Json][] => [
      ["response.output_item.added", { output_index: i, item }],
      ["response.output_item.done", { output_index: i, item }],
    ]),
    ["response.completed", { response }],
  ];
  const steps: SseStep[] = events.map(([event, data], i) => ({
    event,
    data: { type: event, sequence_number: i, ...data },
  }));
  return { kind: "sse", steps };
}

export interface StateSetup {
  gw: TestGateway;
  /** The openai SDK with the funded account's key (`KEY`). */
  openai: OpenAI;
  /** The openai SDK with another account's key (`OTHER_KEY`). */
  other: OpenAI;
  chatUp: FakeUpstream;
  anthropicUp: FakeUpstream;
  nativeUp: FakeUpstream;
  geminiUp: FakeUpstream;
  /** Every refusal the fakes' rules made. */
  refused(): unknown[];
  close(): Promise<void>;
}

export async function stateGateway(): Promise<StateSetup> {
  const database = await loopDatabase();
  const chatUp = await fakeUpstream("openai", chatFake, { maxOutputTokens: GPT_MAX_OUTPUT });
  const anthropicUp = await fakeUpstream("anthropic", anthropicFake, {
    maxOutputTokens: CLAUDE_MAX_OUTPUT,
  });
  const nativeUp = await fakeUpstream("openai", nativeFake);
  const geminiUp = await fakeGemini({ maxOutputTokens: GEMINI_MAX_OUTPUT }, geminiFake);
  const gw = await testGateway({
    db: database.db,
    clock: "manual",
    config: baseConfigWith({
      providers: [
        { id: "oa", wire: "openai", base_url: chatUp.baseUrl, api_keys: ["sk-oa-pool"] },
        { id: "an", wire: "anthropic", base_url: anthropicUp.baseUrl, api_keys: ["sk-an-pool"] },
        {
          id: "native",
          wire: "openai",
          base_url: nativeUp.baseUrl,
          api_keys: ["sk-native-pool"],
          responses_native: true,
        },
        // Keys of two projects: each holds only the responses it made.
        {
          id: "native-keys",
          wire: "openai",
          base_url: nativeUp.baseUrl,
          api_keys: ["sk-native-project-a", "sk-native-project-b"],
          responses_native: true,
        },
        { id: "gm", wire: "gemini", base_url: geminiUp.url, api_keys: ["AIza-state-pool"] },
      ],
      models: [
        {
          name: "gpt-x",
          provider: "oa",
          upstream_model: "gpt-upstream",
          price_input_per_mtok: 1,
          max_output_tokens: GPT_MAX_OUTPUT,
        },
        {
          name: "claude-x",
          provider: "an",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1,
          max_output_tokens: CLAUDE_MAX_OUTPUT,
        },
        { name: "gpt-native", provider: "native", upstream_model: "gpt-native-upstream" },
        { name: "gpt-native-keys", provider: "native-keys", upstream_model: "gpt-native-upstream" },
        {
          name: "gemini-x",
          provider: "gm",
          upstream_model: "gemini-upstream",
          price_input_per_mtok: 1,
          max_output_tokens: GEMINI_MAX_OUTPUT,
        },
      ],
      routes: () => [],
      accounts: [
        {
          id: "other",
          balance_idr: 1_000_000,
          rpm_limit: 1000,
          keys: [{ id: "ko", value: OTHER_KEY }],
        },
      ],
    }),
  });
  const client = (apiKey: string) =>
    new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  return {
    gw,
    openai: client(KEY),
    other: client(OTHER_KEY),
    chatUp,
    anthropicUp,
    nativeUp,
    geminiUp,
    refused: () => [
      ...chatUp.refused,
      ...anthropicUp.refused,
      ...nativeUp.refused,
      ...geminiUp.refused,
    ],
    async close() {
      await gw.close();
      await Promise.all([chatUp.close(), anthropicUp.close(), nativeUp.close(), geminiUp.close()]);
      database.done();
    },
  };
}

/** The state gateway for a test file; every fake back to its handler before each test. */
export function useStateGateway(ready: (setup: StateSetup) => void): void {
  let setup: StateSetup | undefined;
  beforeAll(async () => {
    setup = await stateGateway();
    ready(setup);
  });
  afterAll(async () => setup?.close());
  beforeEach(() => {
    setup?.chatUp.reset(chatFake);
    setup?.anthropicUp.reset(anthropicFake);
    setup?.nativeUp.reset(nativeFake);
    setup?.geminiUp.reset(geminiFake);
  });
}
