import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, beforeEach } from "vitest";
import { secretKeyEnv } from "../../src/store/secret-box.js";
import { fakeGemini, geminiJson, geminiStreamSteps } from "./fake-gemini.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  anthropicToolStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
  openaiToolStreamSteps,
  type RecordedRequest,
  type Reply,
} from "./fake-upstream.js";
import { baseConfig, type TestGateway, testGateway } from "./gateway.js";
import { createTestDatabase } from "./postgres.js";

/**
 * One tool loop, as a client library runs it through the gateway: the model asks for the weather
 * tool, the client runs it and sends the result back, the model answers with it. The fake
 * upstreams (which check every body as the real APIs do) answer by the conversation they get:
 * a tool call until a tool result is in it, then the answer quoting that result.
 */

export const WEATHER_TOOL = "get_weather";
export const WEATHER_ARGS = { city: "Jakarta" };
/** What the client's tool returns; the final answer quotes it, so a lost result shows. */
export const WEATHER_RESULT = "31 C and humid";
export const answerFor = (result: string) => `The weather in Jakarta: ${result}.`;

/** Model maxima: the fakes refuse a larger output limit as the real APIs do. */
export const GPT_MAX_OUTPUT = 16_384;
export const CLAUDE_MAX_OUTPUT = 64_000;
export const GEMINI_MAX_OUTPUT = 8_192;
/** The gateway's pool key for the fake Gemini API, the one key it accepts. */
const GEMINI_POOL_KEY = "AIza-loop-pool-key";
/** What the fake Gemini signs its function calls with; it refuses a call sent back without it. */
const GEMINI_SIGNATURE = Buffer.from("loop-thought-signature").toString("base64");

type Json = Record<string, unknown>;

function toolResultIn(req: RecordedRequest): string | undefined {
  const messages = (req.body.messages as Json[] | undefined) ?? [];
  const last = messages.at(-1);
  if (!last) return undefined;
  if (last.role === "tool") return String(last.content);
  if (last.role === "user" && Array.isArray(last.content)) {
    const result = (last.content as Json[]).find((b) => b.type === "tool_result");
    if (!result) return undefined;
    const content = result.content;
    if (typeof content === "string") return content;
    return ((content as Json[] | undefined) ?? []).map((b) => String(b.text ?? "")).join("");
  }
  return undefined;
}

let calls = 0;

export function openaiLoop(req: RecordedRequest): Reply {
  const result = toolResultIn(req);
  const stream = req.body.stream === true;
  if (result !== undefined) {
    const text = answerFor(result);
    return stream ? { kind: "sse", steps: openaiStreamSteps([text]) } : openaiJson(text);
  }
  const id = `call_w${++calls}`;
  const args = JSON.stringify(WEATHER_ARGS);
  if (!stream)
    return openaiJson(null, { toolCalls: [{ id, name: WEATHER_TOOL, arguments: args }] });
  return {
    kind: "sse",
    steps: openaiToolStreamSteps([
      { id, name: WEATHER_TOOL, argumentPieces: [args.slice(0, 5), args.slice(5)] },
    ]),
  };
}

export function anthropicLoop(req: RecordedRequest): Reply {
  const result = toolResultIn(req);
  const stream = req.body.stream === true;
  if (result !== undefined) {
    const text = answerFor(result);
    return stream ? { kind: "sse", steps: anthropicStreamSteps([text]) } : anthropicJson(text);
  }
  const id = `toolu_w${++calls}`;
  const args = JSON.stringify(WEATHER_ARGS);
  if (!stream)
    return anthropicJson(null, { toolUses: [{ id, name: WEATHER_TOOL, input: WEATHER_ARGS }] });
  return {
    kind: "sse",
    steps: anthropicToolStreamSteps([
      { id, name: WEATHER_TOOL, jsonPieces: [args.slice(0, 5), args.slice(5)] },
    ]),
  };
}

/** The function response in the last turn of a Gemini request, if it ends with one. */
function geminiToolResult(req: RecordedRequest): string | undefined {
  const contents = (req.body.contents as Json[] | undefined) ?? [];
  const parts = (contents.at(-1)?.parts as Json[] | undefined) ?? [];
  const response = parts.find((p) => p.functionResponse)?.functionResponse as Json | undefined;
  if (!response) return undefined;
  const output = (response.response as Json | undefined)?.output;
  return typeof output === "string" ? output : JSON.stringify(response.response);
}

/** Whether the request's function calls carry the signature the fake gave them. */
function signatureKept(req: RecordedRequest): boolean {
  const contents = (req.body.contents as Json[] | undefined) ?? [];
  const calls = contents.flatMap((c) => (c.parts as Json[]).filter((p) => p.functionCall));
  return calls.length > 0 && calls.every((call) => call.thoughtSignature === GEMINI_SIGNATURE);
}

/**
 * As `openaiLoop`, for Gemini: the answer quotes the tool's result only if the call came back
 * with its thought signature (Google's placeholder would pass the fake's rules, not this).
 */
export function geminiLoop(req: RecordedRequest): Reply {
  const result = geminiToolResult(req);
  const stream = req.path.includes(":streamGenerateContent");
  if (result !== undefined) {
    const text = signatureKept(req) ? answerFor(result) : "The thought signature was lost.";
    return stream ? { kind: "sse", steps: geminiStreamSteps([text]) } : geminiJson(text);
  }
  const calls = [{ name: WEATHER_TOOL, args: WEATHER_ARGS, signature: GEMINI_SIGNATURE }];
  return stream
    ? { kind: "sse", steps: geminiStreamSteps([], { calls }) }
    : geminiJson(null, { calls });
}

export interface LoopSetup {
  gw: TestGateway;
  openaiUp: FakeUpstream;
  anthropicUp: FakeUpstream;
  geminiUp: FakeUpstream;
  close(): Promise<void>;
}

/**
 * The database the client suites' gateway runs on: SQLite, or with `GATEWAY_TEST_BACKEND=postgres`
 * (the `clients on postgres` project of vitest.config.ts) a fresh database on the run's Postgres
 * server, so every client library is also run against the Postgres backend.
 */
export async function loopDatabase(): Promise<{ db?: string; done(): void }> {
  if (process.env.GATEWAY_TEST_BACKEND !== "postgres") return { done() {} };
  const saved = process.env[secretKeyEnv];
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  return {
    db: await createTestDatabase(),
    done() {
      if (saved === undefined) delete process.env[secretKeyEnv];
    },
  };
}

/**
 * The gateway with `gpt-x` on a fake OpenAI API, `claude-x` on a fake Anthropic API and
 * `gemini-x` on a fake Gemini API.
 */
export async function loopGateway(): Promise<LoopSetup> {
  const database = await loopDatabase();
  const openaiUp = await fakeUpstream("openai", openaiLoop, { maxOutputTokens: GPT_MAX_OUTPUT });
  const anthropicUp = await fakeUpstream("anthropic", anthropicLoop, {
    maxOutputTokens: CLAUDE_MAX_OUTPUT,
  });
  const geminiUp = await fakeGemini(
    { maxOutputTokens: GEMINI_MAX_OUTPUT, apiKeys: [GEMINI_POOL_KEY] },
    geminiLoop,
  );
  const gw = await testGateway({
    db: database.db,
    config: baseConfig({
      providers: [
        { id: "oa", wire: "openai", base_url: openaiUp.baseUrl, api_keys: ["sk-oa-pool"] },
        { id: "an", wire: "anthropic", base_url: anthropicUp.baseUrl, api_keys: ["sk-an-pool"] },
        { id: "gm", wire: "gemini", base_url: geminiUp.url, api_keys: [GEMINI_POOL_KEY] },
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
        {
          name: "gemini-x",
          provider: "gm",
          upstream_model: "gemini-upstream",
          price_input_per_mtok: 1,
          max_output_tokens: GEMINI_MAX_OUTPUT,
        },
      ],
      routes: [],
    }),
  });
  return {
    gw,
    openaiUp,
    anthropicUp,
    geminiUp,
    async close() {
      await gw.close();
      await openaiUp.close();
      await anthropicUp.close();
      await geminiUp.close();
      database.done();
    },
  };
}

/**
 * The loop gateway for a test file: started before its tests and closed after them, with each fake
 * back to its loop before every test (a test may answer otherwise). `ready` gets it once started.
 */
export function useLoopGateway(ready: (setup: LoopSetup) => void): void {
  let setup: LoopSetup | undefined;
  beforeAll(async () => {
    setup = await loopGateway();
    ready(setup);
  });
  afterAll(async () => setup?.close());
  beforeEach(() => {
    setup?.openaiUp.reset(openaiLoop);
    setup?.anthropicUp.reset(anthropicLoop);
    setup?.geminiUp.reset(geminiLoop);
  });
}

/** Every request a fake got was accepted by its rules. */
export function noRefusals(setup: LoopSetup): unknown[] {
  return [...setup.openaiUp.refused, ...setup.anthropicUp.refused, ...setup.geminiUp.refused];
}
