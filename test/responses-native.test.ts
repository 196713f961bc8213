import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { lastLogged, quota } from "./support/api.js";
import { deferred, type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import { baseConfigWith, KEY, type TestGateway, testGateway } from "./support/gateway.js";
import { deliveredTokens, loggedAs, requestTextTokens } from "./support/metering.js";

/** A provider that speaks the Responses API itself gets /v1/responses as-is (model mapped). */

const response = (text: string) => ({
  id: "resp_upstream_1",
  object: "response",
  created_at: 1_700_000_000,
  status: "completed",
  model: "up-model",
  output: [
    {
      type: "message",
      id: "msg_1",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text, annotations: [] }],
    },
  ],
  usage: { input_tokens: 11, output_tokens: 7, total_tokens: 18 },
});

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        {
          id: "native",
          wire: "openai",
          base_url: upstream.baseUrl,
          api_keys: ["sk-native-1"],
          responses_native: true,
        },
        // The same fake spoken to as chat completions: /v1/responses goes through the bridge.
        { id: "bridged", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-native-1"] },
      ],
      models: [
        {
          name: "native-model",
          provider: "native",
          upstream_model: "up-model",
          price_input_per_mtok: 1_000,
          price_output_per_mtok: 2_000,
        },
        { name: "bridged-model", provider: "bridged", upstream_model: "up-model" },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

describe("POST /v1/responses to a provider with a native Responses API", () => {
  it("forwards the body with only the model mapped, and bills the reported usage", async () => {
    upstream.reset(() => ({ kind: "json", body: response("native hello") }));
    const before = await quota(gw);
    const res = await openai.responses.create({
      model: "native-model",
      input: "hi",
      instructions: "short",
    });
    expect(res.output_text).toBe("native hello");
    expect(res.model).toBe("native-model");
    expect(upstream.last.path).toBe("/v1/responses");
    expect(upstream.last.body).toEqual({ model: "up-model", input: "hi", instructions: "short" });
    expect(upstream.last.headers.authorization).toBe("Bearer sk-native-1");
    const after = await quota(gw);
    expect(Math.round((before.balance_idr - after.balance_idr) * 1_000_000)).toBe(
      11 * 1_000 + 7 * 2_000,
    );
  });

  it("bills an answer that reports no usage by an estimate, JSON and stream alike", async () => {
    const { usage: _, ...noUsage } = response("Sixteen chars!!!");
    const sent = () => requestTextTokens(upstream.last.body);
    upstream.reset(() => ({ kind: "json", body: noUsage }));
    await openai.responses.create({ model: "native-model", input: "hi" });
    expect(await lastLogged(gw)).toMatchObject({ input_tokens: sent(), output_tokens: 4 });

    const item = noUsage.output[0];
    const part = { item_id: "msg_1", output_index: 0, content_index: 0 };
    upstream.reset(() => ({
      kind: "sse",
      steps: [
        ["response.created", { response: { ...noUsage, status: "in_progress", output: [] } }],
        ["response.output_item.added", { output_index: 0, item: { ...item, content: [] } }],
        [
          "response.content_part.added",
          { ...part, part: { type: "output_text", text: "", annotations: [] } },
        ],
        ["response.output_text.delta", { ...part, delta: "Sixteen " }],
        ["response.output_text.delta", { ...part, delta: "chars!!!" }],
        ["response.output_text.done", { ...part, text: "Sixteen chars!!!" }],
        ["response.output_item.done", { output_index: 0, item }],
        ["response.completed", { response: noUsage }],
      ].map(([event, data], i) => ({
        event: event as string,
        data: { type: event, sequence_number: i, ...(data as object) },
      })),
    }));
    const final = await openai.responses
      .stream({ model: "native-model", input: "hi" })
      .finalResponse();
    expect(final.output_text).toBe("Sixteen chars!!!");
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: sent(),
      output_tokens: deliveredTokens(["Sixteen ", "chars!!!"]),
    });
  });

  it("passes the response.* event stream through, billed by the usage of response.completed", async () => {
    const before = (await quota(gw)).balance_idr;
    const done = response("streamed");
    upstream.reset(() => ({
      kind: "sse",
      steps: [
        ["response.created", { response: { ...done, status: "in_progress", output: [] } }],
        [
          "response.output_item.added",
          {
            output_index: 0,
            item: {
              type: "message",
              id: "msg_1",
              status: "in_progress",
              role: "assistant",
              content: [],
            },
          },
        ],
        [
          "response.content_part.added",
          {
            item_id: "msg_1",
            output_index: 0,
            content_index: 0,
            part: { type: "output_text", text: "", annotations: [] },
          },
        ],
        [
          "response.output_text.delta",
          { item_id: "msg_1", output_index: 0, content_index: 0, delta: "streamed" },
        ],
        [
          "response.output_text.done",
          { item_id: "msg_1", output_index: 0, content_index: 0, text: "streamed" },
        ],
        ["response.output_item.done", { output_index: 0, item: done.output[0] }],
        ["response.completed", { response: done }],
      ].map(([event, data], i) => {
        const body = { type: event, sequence_number: i, ...(data as object) };
        // The text delta pretty-printed: one SSE event in several `data:` lines.
        return event === "response.output_text.delta"
          ? { event, data: JSON.stringify(body, null, 2).split("\n").join("\ndata: ") }
          : { event: event as string, data: body };
      }),
    }));
    const stream = openai.responses.stream({ model: "native-model", input: "hi" });
    const deltas: string[] = [];
    const models: string[] = [];
    stream.on("response.output_text.delta", (e) => deltas.push(e.delta));
    stream.on("response.created", (e) => models.push(e.response.model));
    stream.on("response.completed", (e) => models.push(e.response.model));
    const final = await stream.finalResponse();
    expect(deltas).toEqual(["streamed"]);
    expect(final.output_text).toBe("streamed");
    // The lifecycle events name the model the client asked for, never the upstream's.
    expect(models).toEqual(["native-model", "native-model"]);
    expect((await quota(gw)).balance_idr).toBeLessThan(before);
    expect(upstream.last.body).toMatchObject({ model: "up-model", stream: true });
  });

  it("charges a stream left after a function call's name for the name", async () => {
    const never = deferred();
    const name = "get_current_weather_in_city";
    const started = { ...response(""), status: "in_progress", output: [] };
    upstream.reset(() => ({
      kind: "sse",
      steps: [
        { event: "response.created", data: { type: "response.created", response: started } },
        {
          event: "response.output_item.added",
          data: {
            type: "response.output_item.added",
            output_index: 0,
            item: { type: "function_call", id: "fc_1", call_id: "call_1", name, arguments: "" },
          },
        },
        // The provider sends nothing more until the client has gone.
        {
          event: "response.function_call_arguments.delta",
          data: { type: "response.function_call_arguments.delta", item_id: "fc_1", delta: "{}" },
          gate: never.promise,
        },
      ].map((step, i) => ({ ...step, data: { ...step.data, sequence_number: i } })),
    }));
    const abort = new AbortController();
    const { data: stream, response: res } = await openai.responses
      .create({ model: "native-model", input: "weather?", stream: true }, { signal: abort.signal })
      .withResponse();
    const id = res.headers.get("x-request-id") ?? "";
    for await (const event of stream) {
      if (event.type === "response.output_item.added") break;
    }
    abort.abort();
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    never.resolve();
    expect(row).toMatchObject({ error_code: "client_closed" });
    expect(row?.output_tokens).toBeGreaterThanOrEqual(deliveredTokens([name]));
    expect(row?.cost_micro).toBeGreaterThan(0);
  });

  it("maps an upstream rejection like any other", async () => {
    upstream.reset(() => ({
      kind: "json",
      status: 400,
      body: { error: { message: "secret upstream text", code: "context_length_exceeded" } },
    }));
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "native-model", input: "x" }),
    });
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(JSON.parse(text).error).toMatchObject({
      type: "invalid_request_error",
      code: "context_length_exceeded",
    });
    expect(text).not.toContain("secret upstream text");
  });
});

describe("the body a native Responses provider gets", () => {
  // Pretty-printed, a long conversation past the size sent as bytes, and a character outside ASCII.
  const long = "Grüße ✓ ".repeat(2_000);
  const written = (fields: Record<string, unknown>) =>
    JSON.stringify(
      { input: [{ role: "user", content: long }], ...fields, model: "native-model" },
      null,
      2,
    );
  const send = (text: string) =>
    fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: text,
    });
  const renamed = (text: string) => text.replace('"model": "native-model"', '"model": "up-model"');
  const responseStream = (text: string) => {
    const done = response(text);
    return [
      ["response.created", { response: { ...done, status: "in_progress", output: [] } }],
      ["response.completed", { response: done }],
    ].map(([event, data], i) => ({
      event: event as string,
      data: { type: event, sequence_number: i, ...(data as object) },
    }));
  };

  it("is the client's text with only the model renamed, stored or not, JSON or stream", async () => {
    for (const fields of [{}, { store: false }, { store: true, stream: true }]) {
      const streamed = "stream" in fields;
      upstream.reset(() =>
        streamed
          ? { kind: "sse", steps: responseStream("hello") }
          : { kind: "json", body: response("hello") },
      );
      const sent = written(fields);
      const res = await send(sent);
      expect(res.status).toBe(200);
      await res.text();
      expect(upstream.last.raw).toBe(renamed(sent));
    }
  });

  it("is the client's body with the provider's own id on a turn that continues a response the provider holds", async () => {
    upstream.reset(() => ({ kind: "json", body: { ...response("first"), id: "resp_held_1" } }));
    const first = await send(written({}));
    // The gateway's id: the provider may give its own again, to another chain or account.
    const { id } = (await first.json()) as { id: string };
    expect(id).not.toBe("resp_held_1");
    upstream.reset(() => ({ kind: "json", body: { ...response("second"), id: "resp_held_2" } }));
    const next = written({ previous_response_id: id });
    expect((await send(next)).status).toBe(200);
    expect(upstream.last.body).toEqual({
      ...JSON.parse(next),
      model: "up-model",
      previous_response_id: "resp_held_1",
    });
  });

  it("is written anew where the gateway changes it: a null previous id left out", async () => {
    upstream.reset(() => ({ kind: "json", body: response("again") }));
    const nulled = written({ previous_response_id: null });
    expect((await send(nulled)).status).toBe(200);
    expect(upstream.last.raw).not.toBe(renamed(nulled));
    expect(upstream.last.body).not.toHaveProperty("previous_response_id");
    expect(upstream.last.body.input).toEqual([{ role: "user", content: long }]);
  });
});

describe("a stored prompt template (`prompt`) on /v1/responses", () => {
  const request = {
    model: "native-model",
    input: "What should I see?",
    prompt: { id: "pmpt_abc123", variables: { city: "Bandung" } },
  };

  it("reaches a native Responses provider as the client sent it", async () => {
    upstream.reset(() => ({ kind: "json", body: response("see the volcano") }));
    const res = await openai.responses.create(request);
    expect(res.output_text).toBe("see the volcano");
    expect(upstream.last.body).toEqual({ ...request, model: "up-model" });
  });

  it("is refused before anything is sent when the model is served through the chat bridge", async () => {
    upstream.reset();
    const err = await openai.responses
      .create({ ...request, model: "bridged-model" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("`prompt`");
    expect(upstream.requests).toHaveLength(0);
  });
});

describe("POST /v1/responses/input_tokens to a provider with a native Responses API", () => {
  it("asks the provider's own count, with the body as /v1/responses would send it", async () => {
    upstream.reset(() => ({ kind: "json", body: response("A long answer to remember.") }));
    const first = await openai.responses.create({ model: "native-model", input: "Remember me." });
    const alone = await openai.responses.inputTokens.count({
      model: "native-model",
      input: "And?",
    });
    expect(upstream.last.path).toBe("/v1/responses/input_tokens");
    expect(upstream.last.body).toEqual({ model: "up-model", input: "And?" });
    const chained = await openai.responses.inputTokens.count({
      model: "native-model",
      previous_response_id: first.id,
      input: "And?",
    });
    expect(upstream.refused).toEqual([]);
    // The provider holds the chain under its own id: the body goes as the client wrote it, with
    // that id.
    expect(first.id).not.toBe("resp_upstream_1");
    expect(upstream.last.body).toEqual({
      model: "up-model",
      previous_response_id: "resp_upstream_1",
      input: "And?",
    });
    expect(chained.object).toBe("response.input_tokens");
    expect(chained.input_tokens).toBeGreaterThan(alone.input_tokens);
  });
});
