import OpenAI from "openai";
import type { Completion } from "openai/resources/completions";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { parseConfig } from "../src/server/config/load.js";
import { admin, errorOf, idleMoney, money } from "./support/api.js";
import {
  completionChunk,
  completionJson,
  completionStreamSteps,
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
} from "./support/fake-upstream.js";
import {
  backends,
  baseConfig,
  baseConfigWith,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { requestTextTokens } from "./support/metering.js";
import { streamDataInText, streamEvents, textPastKeepalive } from "./support/sse.js";

/**
 * POST /v1/completions for the editors that call it (Continue's autocomplete, Tabby, llama.cpp and
 * vLLM clients): a provider that serves the Completions API itself (`completions_native`) is sent
 * the client's body as written, only the model renamed, so fill-in-the-middle (`suffix`), `echo`,
 * `logprobs`, `best_of` and token-id prompts reach it; held, metered and logged as the chat path
 * is. The mock fills in the middle itself, so an editor's autocomplete works offline. Both get
 * Continue's own request, byte for byte.
 */

/*
 * Continue's autocomplete with an OpenAI-compatible provider (`provider: openai` or `vllm`, core
 * of continuedev/continue): its autocomplete calls `streamComplete(prompt, { raw: true })` (those
 * providers have no `supportsFim`), which for a model whose name does not start with "gpt" or "o"
 * posts to `{apiBase}completions` the chat body of its completion options with `prompt` in place
 * of `messages`: model, max_tokens (4096 unless configured), temperature (0.01 unless
 * configured), stream: true, stop (the FIM template's stop tokens, then "/src/", "#- coding:
 * utf-8" and "```"; cut to four only for api.openai.com, Groq, Azure and port 1337), and the
 * prompt, a FIM template chosen by the model's name with the text around the cursor in it; no
 * `suffix`, no `stream_options`. Its headers: Content-Type, Authorization: Bearer and api-key.
 * It reads `choices[0].text` of each chunk.
 */
const QWEN_STOPS = [
  "<|endoftext|>",
  "<|fim_prefix|>",
  "<|fim_middle|>",
  "<|fim_suffix|>",
  "<|fim_pad|>",
  "<|repo_name|>",
  "<|file_sep|>",
  "<|im_start|>",
  "<|im_end|>",
];
const COMMON_STOPS = ["/src/", "#- coding: utf-8", "```"];
const PREFIX = "import math\n\ndef add(a, b):\n    ";
const SUFFIX = "\n\nprint(add(1, 2))\n";

/** Continue's request for a Qwen2.5-Coder model named `model` (its qwen FIM template), as text. */
function continueQwenRequest(model: string): string {
  return JSON.stringify({
    model,
    max_tokens: 4096,
    temperature: 0.01,
    stream: true,
    stop: [...QWEN_STOPS, ...COMMON_STOPS],
    prompt: `<|fim_prefix|>${PREFIX}<|fim_suffix|>${SUFFIX}<|fim_middle|>`,
  });
}

/**
 * Continue's request for a model whose name has "gpt" or "claude" in it (the demo's `mock-gpt`):
 * its hole-filler prompt, examples first (each a `<QUERY>` with a hole), the text around the
 * cursor in the last `<QUERY>`, and `</COMPLETION>` as the template's stop.
 */
function continueHoleFillerRequest(model: string): string {
  const examples =
    "You fill holes in files. Answer with the text for the hole inside <COMPLETION/>.\n\n" +
    "## EXAMPLE QUERY:\n\n<QUERY>\nfunction twice(x) {\n  {{FILL_HERE}}\n}\n</QUERY>\n\n" +
    "## CORRECT COMPLETION\n\n<COMPLETION>return 2 * x;</COMPLETION>";
  return JSON.stringify({
    model,
    max_tokens: 4096,
    temperature: 0.01,
    stream: true,
    stop: ["</COMPLETION>", ...COMMON_STOPS],
    prompt: `${examples}\n\n<QUERY>\n${PREFIX}{{FILL_HERE}}${SUFFIX}\n</QUERY>\nTASK: Fill the {{FILL_HERE}} hole. Answer only with the completion.\n<COMPLETION>`,
  });
}

/**
 * Continue's providers that send `suffix` to `{apiBase}completions` (SiliconFlow, LlamaStack; its
 * DeepSeek provider the same body to `{apiBase}beta/completions`): the text before the cursor as
 * `prompt`, the text after it as `suffix`.
 */
function continueSuffixRequest(model: string): string {
  // The stop sequences are still those of the template its model's name picks.
  const template = model.includes("qwen") ? QWEN_STOPS : ["</COMPLETION>"];
  return JSON.stringify({
    model,
    prompt: PREFIX,
    suffix: SUFFIX,
    max_tokens: 4096,
    temperature: 0.01,
    stop: [...template, ...COMMON_STOPS],
    stream: true,
  });
}

/**
 * Continue's `deepseek` provider (core/llm/llms/Deepseek.ts): its fill-in-the-middle is a POST of
 * `continueSuffixRequest`'s body to `new URL("beta/completions", apiBase)`, DeepSeek's beta path,
 * with its own headers. Continue ends an apiBase with "/", so the base URL docs/clients.md gives
 * (`.../v1/`, or `.../v1`) makes it `/v1/beta/completions`.
 */
function continueDeepseekFim(gw: { url: string }, body: string): Promise<Response> {
  return fetch(new URL("beta/completions", `${gw.url}/v1/`), {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json",
      Authorization: `Bearer ${KEY}`,
    },
    body,
  });
}

/** Continue's headers: its key in Authorization and, for Azure, in api-key too. */
const continueHeaders = {
  "content-type": "application/json",
  authorization: `Bearer ${KEY}`,
  "api-key": KEY,
};

/** A completion stream as Continue reads it: `choices[0].text` of each chunk, joined. */
async function continueReads(res: Response): Promise<{ text: string; events: unknown[] }> {
  expect(res.status, res.status === 200 ? "" : await res.clone().text()).toBe(200);
  const events = await streamDataInText<Completion>(await res.text());
  let text = "";
  for (const event of events) if (event !== "[DONE]") text += event.choices[0]?.text ?? "";
  return { text, events };
}

const sdk = (gw: { url: string }) =>
  new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });

/** Each choice's text of a completion stream's chunks, by its index. */
function textsOf(chunks: Completion[]): string[] {
  const texts: string[] = [];
  for (const chunk of chunks)
    for (const choice of chunk.choices)
      texts[choice.index] = (texts[choice.index] ?? "") + choice.text;
  return texts;
}

describe("the mock fills in the middle, so an editor's autocomplete works offline", () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await testGateway({
      config: baseConfigWith({
        models: [{ name: "qwen2.5-coder-mock", provider: "mock", price_input_per_mtok: 1 }],
        routes: () => [{ name: "fim-route", steps: ["mock-down", "mock-gpt"] }],
      }),
    });
  });
  afterAll(() => gw?.close());

  it("`suffix`: an answer naming the last line before the insertion point and the first after it, the same each time, whole and streamed", async () => {
    const asked = { model: "mock-gpt", prompt: PREFIX, suffix: SUFFIX, max_tokens: 64 };
    const whole = await sdk(gw).completions.create(asked);
    expect(whole.object).toBe("text_completion");
    expect(whole.choices[0].text).toMatch(
      /^Mock fill between "def add\(a, b\):" and "print\(add\(1, 2\)\)"\. \w/,
    );
    expect(whole.choices[0].finish_reason).toBe("stop");
    expect((await sdk(gw).completions.create(asked)).choices[0].text).toBe(whole.choices[0].text);
    const chunks: Completion[] = [];
    for await (const chunk of await sdk(gw).completions.create({ ...asked, stream: true }))
      chunks.push(chunk);
    expect(textsOf(chunks)).toEqual([whole.choices[0].text]);
    // The suffix is input too, and other text after the insertion point is another answer.
    const plain = await sdk(gw).completions.create({ model: "mock-gpt", prompt: PREFIX });
    expect(whole.usage!.prompt_tokens).toBeGreaterThan(plain.usage!.prompt_tokens);
    const other = await sdk(gw).completions.create({ ...asked, suffix: "\n\nprint(add(3, 4))\n" });
    expect(other.choices[0].text).toContain('and "print(add(3, 4))"');
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", state: "settled", status: 200 });
  });

  it("the FIM template an editor writes into the prompt: the hole of each is filled", async () => {
    const templates: [string, string][] = [
      ["qwen", `<|fim_prefix|>${PREFIX}<|fim_suffix|>${SUFFIX}<|fim_middle|>`],
      [
        "qwen, several files",
        `<|repo_name|>calc\n<|file_sep|>util.py\nx = 1\n<|file_sep|>main.py\n<|fim_prefix|>${PREFIX}<|fim_suffix|>${SUFFIX}<|fim_middle|>`,
      ],
      ["starcoder", `<fim_prefix>${PREFIX}<fim_suffix>${SUFFIX}<fim_middle>`],
      ["deepseek", `<｜fim▁begin｜>${PREFIX}<｜fim▁hole｜>${SUFFIX}<｜fim▁end｜>`],
      ["codellama", `<PRE> ${PREFIX} <SUF>${SUFFIX} <MID>`],
      ["codestral", `[SUFFIX]${SUFFIX}[PREFIX]${PREFIX}`],
    ];
    for (const [name, prompt] of templates) {
      const done = await sdk(gw).completions.create({ model: "mock-gpt", prompt, max_tokens: 64 });
      expect(done.choices[0].text, name).toMatch(
        /^Mock fill between "def add\(a, b\):" and "print\(add\(1, 2\)\)"\./,
      );
    }
    // A prompt that is no template is answered as a prompt.
    const plain = await sdk(gw).completions.create({ model: "mock-gpt", prompt: "def add(a, b):" });
    expect(plain.choices[0].text).toMatch(/^Mock reply to: def add\(a, b\):/);
  });

  it("`echo: true`: the answer starts with the prompt; its usage counts the answer alone", async () => {
    const asked = { model: "mock-gpt", prompt: "def add(a, b):", max_tokens: 20 };
    const plain = await sdk(gw).completions.create(asked);
    const echoed = await sdk(gw).completions.create({ ...asked, echo: true });
    expect(echoed.choices[0].text).toBe(`def add(a, b):${plain.choices[0].text}`);
    expect(echoed.usage).toEqual(plain.usage);
    const chunks: Completion[] = [];
    for await (const chunk of await sdk(gw).completions.create({
      ...asked,
      echo: true,
      stream: true,
    }))
      chunks.push(chunk);
    expect(textsOf(chunks)).toEqual([echoed.choices[0].text]);
  });

  it("a route of mocks fills in too; what the mock does not carry is refused naming `completions_native`, nothing logged", async () => {
    // Both steps are mocks: `mock-down` fails, `mock-gpt` fills in.
    const done = await sdk(gw).completions.create({
      model: "fim-route",
      prompt: PREFIX,
      suffix: SUFFIX,
    });
    expect(done.choices[0].text).toMatch(/^Mock fill between/);
    const before = await gw.listRequests({ limit: 1000 });
    for (const extra of [{ logprobs: 2 }, { best_of: 2 }, { prompt: [[1, 2, 3]] }]) {
      const res = await post(gw, "/v1/completions", {
        model: "mock-gpt",
        prompt: PREFIX,
        suffix: SUFFIX,
        ...extra,
      });
      const refused = await errorOf(res);
      expect(refused, JSON.stringify(extra)).toMatchObject({ status: 400, code: "bad_request" });
      expect(refused.message).toContain(`\`${Object.keys(extra)[0]}\``);
      expect(refused.message).toContain("`completions_native: true`");
    }
    expect(await gw.listRequests({ limit: 1000 })).toHaveLength(before.length);
  });

  it("Continue's autocomplete request for `mock-gpt` (its hole-filler prompt), raw: a stream whose text fills the hole", async () => {
    const res = await fetch(`${gw.url}/v1/completions`, {
      method: "POST",
      headers: continueHeaders,
      body: continueHoleFillerRequest("mock-gpt"),
    });
    const { text, events } = await continueReads(res);
    expect(text).toMatch(/^Mock fill between "def add\(a, b\):" and "print\(add\(1, 2\)\)"\. \w/);
    expect(events.at(-1)).toBe("[DONE]");
    for (const event of events.slice(0, -1)) expect(event).toMatchObject({ model: "mock-gpt" });
  });

  it("Continue's autocomplete request for a Qwen coder (its FIM template, twelve stop sequences), raw: a stream whose text fills the hole", async () => {
    const res = await fetch(`${gw.url}/v1/completions`, {
      method: "POST",
      headers: continueHeaders,
      body: continueQwenRequest("qwen2.5-coder-mock"),
    });
    const { text, events } = await continueReads(res);
    expect(text).toMatch(/^Mock fill between "def add\(a, b\):" and "print\(add\(1, 2\)\)"\. \w/);
    expect(events.at(-1)).toBe("[DONE]");
  });

  it("Continue's `suffix` request (its SiliconFlow provider), raw: a stream whose text fills in", async () => {
    const res = await fetch(`${gw.url}/v1/completions`, {
      method: "POST",
      headers: continueHeaders,
      body: continueSuffixRequest("mock-gpt"),
    });
    const { text } = await continueReads(res);
    expect(text).toMatch(/^Mock fill between "def add\(a, b\):" and "print\(add\(1, 2\)\)"\./);
  });

  it("Continue's `deepseek` provider, raw: its FIM request to `{apiBase}beta/completions` is answered as /v1/completions, and logged as a completion", async () => {
    const res = await continueDeepseekFim(gw, continueSuffixRequest("mock-gpt"));
    expect(new URL(res.url).pathname).toBe("/v1/beta/completions");
    const { text, events } = await continueReads(res);
    expect(text).toMatch(/^Mock fill between "def add\(a, b\):" and "print\(add\(1, 2\)\)"\./);
    expect(events.at(-1)).toBe("[DONE]");
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", model: "mock-gpt", stream: true });
    // Its body is the Completions API's, checked as /v1/completions checks it.
    const refused = await continueDeepseekFim(gw, JSON.stringify({ model: "mock-gpt" }));
    expect(await errorOf(refused)).toMatchObject({ status: 400, code: "bad_request" });
  });
});

describe("completions_native in the config", () => {
  const provider = (extra: Record<string, unknown>) =>
    baseConfig({
      providers: [
        {
          id: "p",
          wire: "anthropic",
          base_url: "http://127.0.0.1:9/v1",
          ...extra,
        } as never,
      ],
      models: [],
      routes: [],
    });

  it("is refused on a wire without a Completions API, and when not a boolean, naming the field", () => {
    expect(() => parseConfig(provider({ completions_native: true }), {}, "gateway.json")).toThrow(
      /providers\[0\]\.completions_native: wire "anthropic" has no Completions API of its own/,
    );
    const openai = (value: unknown) =>
      baseConfig({
        providers: [
          {
            id: "p",
            wire: "openai",
            base_url: "http://127.0.0.1:9/v1",
            completions_native: value,
          } as never,
        ],
        models: [],
        routes: [],
      });
    expect(() => parseConfig(openai("yes"), {}, "gateway.json")).toThrow(
      /providers\[0\]\.completions_native/,
    );
    expect(() => parseConfig(openai(true), {}, "gateway.json")).not.toThrow();
  });
});

describe.each(backends)("a provider that serves the Completions API itself, on %s", (backend) => {
  const PRICE_IN = 1_000;
  const PRICE_OUT = 2_000;
  /** OpenAI's Completions API (its rules), and a vLLM server (any number of stop sequences). */
  let oa: FakeUpstream;
  let vl: FakeUpstream;
  let gw: TestGateway;
  beforeAll(async () => {
    oa = await fakeUpstream("openai");
    vl = await fakeUpstream("openai", undefined, { maxOutputTokens: 8_192, completions: "vllm" });
    const priced = {
      price_input_per_mtok: PRICE_IN,
      price_output_per_mtok: PRICE_OUT,
      max_output_tokens: 4_096,
    };
    gw = await gatewayOn(backend, {
      keepaliveMs: 300,
      // The per-minute limit counts in the clock's minute: on a manual clock its two requests
      // stay in one.
      clock: "manual",
      config: baseConfigWith({
        providers: [
          { id: "oa", wire: "openai", base_url: oa.baseUrl, api_keys: ["sk-oa"] },
          {
            id: "cn",
            wire: "openai",
            base_url: oa.baseUrl,
            api_keys: ["sk-cn"],
            completions_native: true,
          },
          {
            id: "vl",
            wire: "openai",
            base_url: vl.baseUrl,
            api_keys: ["sk-vl"],
            completions_native: true,
          },
        ],
        models: [
          { name: "m-chat", provider: "oa", upstream_model: "gpt-up", ...priced },
          { name: "m-native", provider: "cn", upstream_model: "instruct-up", ...priced },
          { name: "qwen2.5-coder", provider: "vl", upstream_model: "Qwen/Coder-7B", ...priced },
        ],
        routes: () => [{ name: "r-chat-first", steps: ["m-chat", "m-native"] }],
      }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    await oa?.close();
    await vl?.close();
  });
  beforeEach(() => {
    oa.reset();
    vl.reset();
  });

  /** The client's text as the provider should get it: only the model's value renamed. */
  const renamed = (text: string, from: string, to: string) =>
    text.replace(JSON.stringify(from), JSON.stringify(to));

  it("a whole completion goes to the provider's /completions as written, only the model renamed (suffix, echo, logprobs, best_of), and comes back as written, only the model renamed", async () => {
    const answer = completionJson(["    return a + b", "    return b + a"], { usage: [21, 12] });
    oa.queue(answer);
    // Written with spacing and an order of keys no serializer of the gateway's would make.
    const written = `{ "prompt": ${JSON.stringify(PREFIX)},\n  "model": "m-native", "suffix": ${JSON.stringify(SUFFIX)}, "echo": true, "logprobs": 2, "best_of": 3, "n": 2, "max_tokens": 32, "stop": ["\\n\\n"], "temperature": 0.2 }`;
    const res = await post(gw, "/v1/completions", written);
    expect(oa.refused).toEqual([]);
    expect(oa.last.path).toBe("/v1/completions");
    expect(oa.last.raw).toBe(renamed(written, "m-native", "instruct-up"));
    expect(oa.last.headers.authorization).toBe("Bearer sk-cn");
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toBe(renamed(JSON.stringify(answer.body), "upstream-model", "m-native"));
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({
      id: res.headers.get("x-request-id"),
      endpoint: "completions",
      model: "m-native",
      provider: "cn",
      state: "settled",
      stream: false,
      usage: { input_tokens: 21, output_tokens: 12 },
      cost_micro: 21 * PRICE_IN + 12 * PRICE_OUT,
    });
  });

  it("token-id prompts and several prompts reach it; the hold covers every prompt's best_of candidates", async () => {
    oa.handle(() => completionJson(["a", "b"], { usage: [4, 40] }));
    const openai = sdk(gw);
    const ids = await openai.completions.create({
      model: "m-native",
      prompt: [
        [1734, 318],
        [257, 1332],
      ],
      max_tokens: 10,
    });
    expect(oa.last.body.prompt).toEqual([
      [1734, 318],
      [257, 1332],
    ]);
    expect(ids.choices.map((choice) => choice.text)).toEqual(["a", "b"]);
    await openai.completions.create({ model: "m-native", prompt: ["one", "two"], max_tokens: 10 });
    expect(oa.last.body.prompt).toEqual(["one", "two"]);
    expect(oa.refused).toEqual([]);
    // 100 IDR pays for one candidate of 4,096 tokens at 2,000 micro-IDR each (8.2 IDR), and not
    // for best_of 20 of each of two prompts (327.7 IDR): refused before anything is sent.
    const made = await admin(gw, "POST", "/accounts", { balance_idr: 100 });
    const { key } = (await made.json()) as { key: { value: string } };
    const headers = { authorization: `Bearer ${key.value}` };
    const one = { model: "m-native", prompt: "one" };
    const paid = await post(gw, "/v1/completions", one, headers);
    expect(paid.status).toBe(200);
    await paid.text();
    const sent = oa.requests.length;
    const many = await post(
      gw,
      "/v1/completions",
      { ...one, prompt: ["one", "two"], best_of: 20 },
      headers,
    );
    expect(await errorOf(many)).toMatchObject({ status: 402, code: "insufficient_balance" });
    expect(oa.requests).toHaveLength(sent);
  });

  it("a stream goes as written with the usage asked for in front, and its chunks come back as written, the model renamed; the usage chunk only when the client asked", async () => {
    const steps = () =>
      completionStreamSteps(["    return ", "a + b"], { usage: [30, 6] }).map((step) =>
        typeof step.data === "object"
          ? { ...step, data: { ...step.data, model: "instruct-up" } }
          : step,
      );
    oa.handle(() => ({ kind: "sse", steps: steps() }));
    const written = JSON.stringify({
      model: "m-native",
      prompt: PREFIX,
      suffix: SUFFIX,
      max_tokens: 16,
      stream: true,
    });
    const res = await post(gw, "/v1/completions", written);
    expect(oa.refused).toEqual([]);
    expect(oa.last.raw).toBe(
      `{"stream_options":{"include_usage":true},${renamed(written, "m-native", "instruct-up").slice(1)}`,
    );
    const events = await streamDataInText<Completion>(await res.text());
    const upstream = steps()
      .map((step) => step.data)
      .filter((data) => typeof data === "object" && !("usage" in (data as object)))
      .map((data) => ({ ...(data as object), model: "m-native" }));
    expect(events).toEqual([...upstream, "[DONE]"]);

    const asked = await sdk(gw).completions.create({
      model: "m-native",
      prompt: PREFIX,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: Completion[] = [];
    for await (const chunk of asked) chunks.push(chunk);
    expect(oa.last.body.stream_options).toEqual({ include_usage: true });
    expect(textsOf(chunks)).toEqual(["    return a + b"]);
    expect(chunks.at(-1)).toMatchObject({
      model: "m-native",
      choices: [],
      usage: { prompt_tokens: 30, completion_tokens: 6 },
    });
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({
      endpoint: "completions",
      stream: true,
      state: "settled",
      usage: { input_tokens: 30, output_tokens: 6 },
      cost_micro: 30 * PRICE_IN + 6 * PRICE_OUT,
    });
  });

  it("a slow stream gets keepalive comments first", async () => {
    const release = deferred();
    oa.handle(() => {
      const [first, ...rest] = completionStreamSteps(["slow ", "fill"]);
      return { kind: "sse", steps: [{ ...first, gate: release.promise }, ...rest] };
    });
    const res = await post(gw, "/v1/completions", {
      model: "m-native",
      prompt: PREFIX,
      suffix: SUFFIX,
      stream: true,
    });
    expect(res.status).toBe(200);
    const text = await textPastKeepalive(res, release.resolve);
    const events = await streamDataInText<Completion>(text);
    expect(events.at(-1)).toBe("[DONE]");
    expect(textsOf(events.filter((e): e is Completion => e !== "[DONE]"))).toEqual(["slow fill"]);
  });

  it("every request is one row charged its price, the balance moved by that once, nothing held; a client that leaves mid-stream is billed the text it was written", async () => {
    const was = await money(gw);
    const before = (await gw.listRequests({ limit: 1000 })).length;
    oa.queue(completionJson(["x = 1"], { usage: null }));
    await sdk(gw).completions.create({ model: "m-native", prompt: "x =", suffix: "\n" });
    const [unreported] = await gw.listRequests({ limit: 1 });
    // No usage reported: the input and the answer's text estimated.
    expect(unreported.usage).toEqual({
      input_tokens: requestTextTokens(oa.last.body),
      output_tokens: Math.ceil("x = 1".length / 4),
    });

    const gone = deferred();
    const FIRST = "    total = sum(";
    oa.handle(() => {
      const steps = completionStreamSteps([FIRST, "items)"], { usage: [30, 9] });
      steps[1] = { ...steps[1], gate: gone.promise };
      return { kind: "sse", steps };
    });
    const abort = new AbortController();
    const res = await post(
      gw,
      "/v1/completions",
      { model: "m-native", prompt: PREFIX, suffix: SUFFIX, stream: true },
      undefined,
      abort.signal,
    );
    let read = "";
    for await (const { data } of streamEvents<Completion>(res)) {
      if (data === "[DONE]") continue;
      read += data.choices.map((choice) => choice.text).join("");
      if (read !== "") break;
    }
    abort.abort();
    expect(read).toBe(FIRST);
    const id = res.headers.get("x-request-id");
    let row = (await gw.listRequests({ limit: 5 })).find((each) => each.id === id);
    for (let i = 0; i < 250 && row?.error_code !== "client_closed"; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      row = (await gw.listRequests({ limit: 5 })).find((each) => each.id === id);
    }
    gone.resolve();
    expect(row).toMatchObject({
      error_code: "client_closed",
      usage: {
        input_tokens: requestTextTokens(oa.last.body),
        output_tokens: Math.ceil(FIRST.length / 4),
      },
    });
    const after = await idleMoney(gw);
    expect(after.held).toBe(0);
    const all = await gw.listRequests({ limit: 1000 });
    const rows = all.slice(0, all.length - before);
    expect(rows).toHaveLength(2);
    for (const each of rows)
      expect(each.cost_micro).toBe(
        each.usage.input_tokens * PRICE_IN + each.usage.output_tokens * PRICE_OUT,
      );
    expect(was.balance - after.balance).toBe(rows.reduce((sum, each) => sum + each.cost_micro, 0));
  });

  it("counts against the account's per-minute request limit with chat", async () => {
    oa.handle(() => completionJson(["x"]));
    const made = await admin(gw, "POST", "/accounts", { balance_idr: 1_000, rpm_limit: 1 });
    const { key } = (await made.json()) as { key: { value: string } };
    const headers = { authorization: `Bearer ${key.value}` };
    const fim = { model: "m-native", prompt: PREFIX, suffix: SUFFIX, max_tokens: 8 };
    const served = await post(gw, "/v1/completions", fim, headers);
    expect(served.status).toBe(200);
    await served.text();
    for (const [path, body] of [
      ["/v1/completions", fim],
      ["/v1/chat/completions", { model: "mock-gpt", messages: [{ role: "user", content: "hi" }] }],
    ] as const) {
      const refused = await post(gw, path, body, headers);
      expect(await errorOf(refused), path).toMatchObject({
        status: 429,
        code: "rate_limit_exceeded",
      });
    }
    expect(oa.requests).toHaveLength(1);
  });

  it("a route narrows to the steps that carry what the request asks: `suffix` skips the chat step, a plain prompt takes it", async () => {
    oa.handle((req) =>
      req.path.endsWith("/chat/completions") ? openaiJson("chat") : completionJson(["native"]),
    );
    const openai = sdk(gw);
    const fim = await openai.completions.create({
      model: "r-chat-first",
      prompt: PREFIX,
      suffix: SUFFIX,
    });
    expect(fim.choices[0].text).toBe("native");
    expect(oa.requests.map((req) => req.path)).toEqual(["/v1/completions"]);
    const plain = await openai.completions.create({ model: "r-chat-first", prompt: PREFIX });
    expect(plain.choices[0].text).toBe("chat");
    expect(oa.last.path).toBe("/v1/chat/completions");
    expect(oa.refused).toEqual([]);
  });

  it("what the provider refuses is the spec's upstream rejection, never its words, and free", async () => {
    const was = await money(gw);
    // OpenAI's API takes logprobs up to 5.
    const res = await post(gw, "/v1/completions", {
      model: "m-native",
      prompt: PREFIX,
      logprobs: 6,
    });
    expect(oa.refused).toHaveLength(1);
    const refused = await errorOf(res);
    expect(refused).toMatchObject({ status: 400, type: "invalid_request_error" });
    expect(refused.message).not.toContain("maximum of 5");
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", cost_micro: 0 });
    expect((await idleMoney(gw)).balance).toBe(was.balance);
  });

  it("Continue's autocomplete request for a Qwen coder on vLLM, raw: reaches the server as written (its twelve stop sequences too), and Continue reads the server's text", async () => {
    vl.handle(() => ({
      kind: "sse",
      steps: [
        { data: completionChunk(["return a + b"], null, "Qwen/Coder-7B") },
        { data: completionChunk([""], "stop", "Qwen/Coder-7B") },
        {
          data: {
            ...completionChunk([], null, "Qwen/Coder-7B"),
            usage: { prompt_tokens: 40, completion_tokens: 4, total_tokens: 44 },
          },
        },
        { data: "[DONE]" },
      ],
    }));
    const written = continueQwenRequest("qwen2.5-coder");
    const res = await fetch(`${gw.url}/v1/completions`, {
      method: "POST",
      headers: continueHeaders,
      body: written,
    });
    const { text, events } = await continueReads(res);
    expect(vl.refused).toEqual([]);
    expect(vl.last.path).toBe("/v1/completions");
    expect(vl.last.raw).toBe(
      `{"stream_options":{"include_usage":true},${renamed(written, "qwen2.5-coder", "Qwen/Coder-7B").slice(1)}`,
    );
    // The gateway's key is the gateway's: the provider gets its own.
    expect(vl.last.headers.authorization).toBe("Bearer sk-vl");
    expect(JSON.stringify(vl.last.headers)).not.toContain(KEY);
    expect(text).toBe("return a + b");
    expect(events).toEqual([
      completionChunk(["return a + b"], null, "qwen2.5-coder"),
      completionChunk([""], "stop", "qwen2.5-coder"),
      "[DONE]",
    ]);
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({
      endpoint: "completions",
      stream: true,
      state: "settled",
      usage: { input_tokens: 40, output_tokens: 4 },
    });
  });

  it("Continue's `suffix` request, raw: reaches the server as written", async () => {
    vl.handle(() => ({ kind: "sse", steps: completionStreamSteps(["return a + b"]) }));
    const written = continueSuffixRequest("qwen2.5-coder");
    const res = await fetch(`${gw.url}/v1/completions`, {
      method: "POST",
      headers: continueHeaders,
      body: written,
    });
    const { text } = await continueReads(res);
    expect(vl.refused).toEqual([]);
    expect(vl.last.raw).toBe(
      `{"stream_options":{"include_usage":true},${renamed(written, "qwen2.5-coder", "Qwen/Coder-7B").slice(1)}`,
    );
    expect(text).toBe("return a + b");
  });

  it("Continue's `deepseek` provider's FIM request, raw: from `{apiBase}beta/completions` to the server's own /completions as written", async () => {
    vl.handle(() => ({ kind: "sse", steps: completionStreamSteps(["return a + b"]) }));
    const written = continueSuffixRequest("qwen2.5-coder");
    const { text } = await continueReads(await continueDeepseekFim(gw, written));
    expect(vl.refused).toEqual([]);
    expect(vl.last.path).toBe("/v1/completions");
    expect(vl.last.raw).toBe(
      `{"stream_options":{"include_usage":true},${renamed(written, "qwen2.5-coder", "Qwen/Coder-7B").slice(1)}`,
    );
    expect(text).toBe("return a + b");
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", state: "settled", stream: true });
  });
});
