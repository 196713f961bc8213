import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { money } from "./support/api.js";
import {
  deferred,
  everyChoice,
  type FakeUpstream,
  openaiStreamSteps,
  type SseStep,
} from "./support/fake-upstream.js";
import { backends, KEY, post, rawRequest, type TestGateway } from "./support/gateway.js";
import { useMeterWires } from "./support/meter-wires.js";
import {
  deliveredTokens,
  type Logged,
  ledgerAgrees,
  logged,
  loggedAs,
} from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * Clients that break the meter from their side: "every token delivered is paid for, once; a
 * token not delivered is not paid for". A messages or Responses body that carries chat's `n`; a
 * chat stream of `n` answers whose chunks carry a delta of each choice, left midway; one left
 * after the first of its answers finished; a client that reads slowly and leaves while a large
 * piece still waits in the gateway's buffer; a provider that reports no usage, read through a
 * translation with the official SDKs. Each on SQLite and Postgres, the balance compared with the
 * request log row by row.
 */

/** micro-IDR per input and per output token of the fake's model. */
const IN = 1_000;
const OUT = 2_000;
/** The mock's prices (`baseConfig`'s mock-gpt). */
const MOCK_IN = 10_000;
const MOCK_OUT = 20_000;
const WORD = "zq ";
const headers = { authorization: `Bearer ${KEY}`, "anthropic-version": "2023-06-01" };

const priceOf = (row: Logged, input: number, output: number) =>
  row.usage.input_tokens * input + row.usage.output_tokens * output;

describe.each(backends)("clients that break the meter, on %s", (backend) => {
  let gw: TestGateway;
  let openai: FakeUpstream;
  let anthropic: FakeUpstream;
  let gemini: FakeUpstream;

  useMeterWires(
    backend,
    { openaiKey: "sk-oa", inputPerMtok: IN, outputPerMtok: OUT },
    (started) => {
      ({ gw, openai, anthropic, gemini } = started);
    },
  );

  it.each([
    ["messages", "/v1/messages", { max_tokens: 100, messages: [{ role: "user", content: "hi" }] }],
    ["responses", "/v1/responses", { max_output_tokens: 100, input: "hi" }],
  ] as const)(
    "%s: an `n` in the body, no field of the style's, holds and charges one answer",
    async (_style, path, rest) => {
      const body = { model: "mock-gpt", ...rest };
      const rowsBefore = (await logged(gw)).length;
      const was = await money(gw);
      const plain = await post(gw, path, body, headers);
      expect(plain.status).toBe(200);
      const [one] = (await logged(gw)).slice(0, 1);
      // A negative `n` held a negative amount (and settled a negative charge), none held the input
      // alone (the answer's output free), a huge one refused the request for want of balance.
      for (const n of [-1_000_000, 0, 0.25, 1_000_000]) {
        const res = await post(gw, path, { ...body, n }, headers);
        expect(res.status, `n=${n}: ${await res.clone().text()}`).toBe(200);
        const [row] = await logged(gw);
        expect(row.usage, `n=${n}`).toEqual(one.usage);
        expect(row.cost_micro, `n=${n}`).toBe(priceOf(row, MOCK_IN, MOCK_OUT));
        expect(row.cost_micro, `n=${n}`).toBe(one.cost_micro);
      }
      const { rows } = await ledgerAgrees(gw, rowsBefore, was);
      expect(rows).toHaveLength(5);
      expect(rows.every((row) => row.cost_micro === one.cost_micro)).toBe(true);
    },
  );

  it("a chat stream of n answers whose chunks carry a delta of each choice, left midway: at least a token for each delta read", async () => {
    const n = 3;
    const chunksRead = 6;
    const more = deferred();
    const steps: SseStep[] = [everyChoice(n, { role: "assistant", content: "" })];
    for (let i = 0; i < 12; i++) steps.push(everyChoice(n, { content: WORD }));
    steps.push(everyChoice(n, {}, "stop"), { data: "[DONE]" });
    // The provider waits after the chunks the client reads: nothing is read ahead of it.
    steps[chunksRead + 1] = { ...steps[chunksRead + 1], gate: more.promise };
    openai.queue({ kind: "sse", steps });
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const abort = new AbortController();
    const res = await post(
      gw,
      "/v1/chat/completions",
      { model: "m-openai", n, stream: true, messages: [{ role: "user", content: "three ways" }] },
      headers,
      abort.signal,
    );
    expect(res.status).toBe(200);
    const id = res.headers.get("x-request-id")!;
    const deltas: string[] = [];
    let chunks = 0;
    for await (const { data } of streamEvents(res)) {
      if (data === "[DONE]") break;
      for (const choice of data.choices)
        if (choice.delta.content) deltas.push(choice.delta.content);
      if (data.choices.some((c: { delta: { content?: string } }) => c.delta.content)) chunks++;
      if (chunks === chunksRead) break;
    }
    abort.abort();
    expect(deltas).toHaveLength(n * chunksRead);
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    more.resolve();
    expect(row?.error_code).toBe("client_closed");
    // Eighteen deltas of three characters: eighteen tokens, where a chunk counted as one delta
    // made six chunks fourteen.
    expect(row?.output_tokens).toBe(deliveredTokens(deltas));
    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(1);
    expect(rows[0].cost_micro).toBe(priceOf(rows[0], IN, OUT));
  });

  it("a stream of two answers left after the first finished: the provider's report of the answer so far is not the whole answer's", async () => {
    // Gemini reports the output so far with every event, a token a word; the gateway counts a
    // word of nine characters as three. Answer 0 finishes at the third event, answer 1 goes on.
    const word = " together";
    const more = deferred();
    const steps: SseStep[] = Array.from({ length: 12 }, (_, i) => ({
      data: {
        candidates: [
          ...(i < 3
            ? [
                {
                  content: { role: "model", parts: [{ text: word }] },
                  index: 0,
                  ...(i === 2 ? { finishReason: "STOP" } : {}),
                },
              ]
            : []),
          {
            content: { role: "model", parts: [{ text: word }] },
            index: 1,
            ...(i === 11 ? { finishReason: "STOP" } : {}),
          },
        ],
        usageMetadata: {
          promptTokenCount: 5,
          candidatesTokenCount: Math.min(i + 1, 3) + i + 1,
          totalTokenCount: 5 + Math.min(i + 1, 3) + i + 1,
        },
        modelVersion: "gemini-up",
        responseId: "gemini-fake",
      },
      ...(i === 8 ? { gate: more.promise } : {}),
    }));
    gemini.queue({ kind: "sse", steps });
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const abort = new AbortController();
    const res = await post(
      gw,
      "/v1/chat/completions",
      { model: "m-gemini", n: 2, stream: true, messages: [{ role: "user", content: "two ways" }] },
      headers,
      abort.signal,
    );
    expect(res.status).toBe(200);
    const id = res.headers.get("x-request-id")!;
    const deltas: string[] = [];
    const finished: number[] = [];
    // Every word before the gate: three of answer 0 (finished), eight of answer 1.
    for await (const { data } of streamEvents(res)) {
      if (data === "[DONE]") break;
      for (const choice of data.choices) {
        if (choice.delta.content) deltas.push(choice.delta.content);
        if (choice.finish_reason) finished.push(choice.index);
      }
      if (deltas.length === 11) break;
    }
    abort.abort();
    expect(finished).toEqual([0]);
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    more.resolve();
    expect(row?.error_code).toBe("client_closed");
    // A stream left midway: the provider's report so far (eleven), but never less than what
    // reached the client (eleven words of nine characters: twenty-five).
    expect(row).toMatchObject({ input_tokens: 5, output_tokens: deliveredTokens(deltas) });
    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(1);
    expect(rows[0].cost_micro).toBe(priceOf(rows[0], IN, OUT));
  });

  it("a provider that reports no usage: the usage a translated answer shows is what is billed (official SDKs)", async () => {
    const text = "zq zq zq zq zq zq zq zq ";
    const noUsage = {
      id: "chatcmpl-fake",
      object: "chat.completion",
      created: 1_700_000_000,
      model: "gpt-up",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: text },
          logprobs: null,
          finish_reason: "stop",
        },
      ],
    };
    const streamed: SseStep[] = openaiStreamSteps(text.match(/\S+ /g)!).filter(
      (step) => !(step.data as { usage?: unknown }).usage,
    );
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const oa = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const an = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const shown: { input: number; output: number }[] = [];

    openai.queue({ kind: "json", body: noUsage });
    const message = await an.messages.create({
      model: "m-openai",
      max_tokens: 100,
      messages: [{ role: "user", content: "count" }],
    });
    shown.push({ input: message.usage.input_tokens, output: message.usage.output_tokens });

    openai.queue({ kind: "json", body: noUsage });
    const response = await oa.responses.create({ model: "m-openai", input: "count" });
    shown.push({ input: response.usage!.input_tokens, output: response.usage!.output_tokens });

    openai.queue({ kind: "sse", steps: streamed });
    const events = await oa.responses.create({ model: "m-openai", input: "count", stream: true });
    for await (const event of events)
      if (event.type === "response.completed")
        shown.push({
          input: event.response.usage!.input_tokens,
          output: event.response.usage!.output_tokens,
        });

    anthropic.queue({
      kind: "json",
      body: {
        id: "msg_fake",
        type: "message",
        role: "assistant",
        model: "claude-up",
        content: [{ type: "text", text }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: {},
      },
    });
    const completion = await oa.chat.completions.create({
      model: "m-anthropic",
      messages: [{ role: "user", content: "count" }],
    });
    shown.push({
      input: completion.usage!.prompt_tokens,
      output: completion.usage!.completion_tokens,
    });

    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(4);
    // Billed by the estimate, never free: and the answer says so, not zero.
    expect(shown).toEqual(
      rows
        .reverse()
        .map((row) => ({ input: row.usage.input_tokens, output: row.usage.output_tokens })),
    );
    for (const row of rows) {
      expect(row.usage.output_tokens).toBeGreaterThan(0);
      expect(row.usage.input_tokens).toBeGreaterThan(0);
      expect(row.cost_micro).toBe(priceOf(row, IN, OUT));
    }
  });

  it("a client that reads slowly and leaves while a large piece waits in the gateway's buffer is charged what left the gateway", async () => {
    // Larger than every buffer between the gateway and a client that stopped reading (Linux's
    // socket buffers grow to 4 MB at most by default): the piece cannot leave the gateway whole
    // before the client reads on, which it never does.
    const large = "x".repeat(6_000_000);
    const five = deferred();
    const steps = openaiStreamSteps([WORD, WORD, WORD, WORD, WORD, large, WORD]);
    steps[6] = { ...steps[6], gate: five.promise };
    // What follows the large piece waits until the client has gone (the fake gives up on a gate
    // after a while): no report of the provider's is read before the client leaves.
    const never = deferred();
    steps[7] = { ...steps[7], gate: never.promise };
    openai.queue({ kind: "sse", steps });
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const socket = rawRequest(gw.url, "/v1/chat/completions", {
      model: "m-openai",
      stream: true,
      max_tokens: 4_000,
      messages: [{ role: "user", content: "a long one" }],
    });
    let head = "";
    const id = await new Promise<string>((resolve, reject) => {
      socket.on("error", reject);
      socket.on("data", (data: Buffer) => {
        head += data.toString("latin1", 0, Math.min(data.length, 4096));
        if (head.split(WORD).length - 1 >= 5) five.resolve();
        // The large piece has begun to arrive: the gateway has written it to the connection.
        if (head.includes("xxxxxxxx")) {
          socket.pause();
          resolve(/x-request-id: (\S+)/i.exec(head)?.[1] ?? "");
        }
      });
    });
    expect(head.startsWith("HTTP/1.1 200")).toBe(true);
    socket.destroy();
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    never.resolve();
    expect(row?.error_code).toBe("client_closed");
    // The five words read whole; the large piece never reached the client.
    expect(row?.output_tokens).toBe(deliveredTokens([WORD, WORD, WORD, WORD, WORD]));
    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(1);
    expect(rows[0].cost_micro).toBe(priceOf(rows[0], IN, OUT));
  });
});
