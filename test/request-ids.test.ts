import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admin } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import { chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * One id per request: every answer carries `x-request-id` (and on /v1/messages `request-id`),
 * both SDKs read it as `_request_id`, and the same id is the request log's row everywhere.
 */

let gw: TestGateway;
beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw.close();
});

const usageIds = async () =>
  (
    (await (
      await fetch(`${gw.url}/v1/usage/requests?limit=20`, {
        headers: { authorization: `Bearer ${KEY}` },
      })
    ).json()) as { data: { id: string }[] }
  ).data.map((r) => r.id);

const adminIds = async () =>
  (
    (await (await admin(gw, "GET", "/requests?limit=20")).json()) as { data: { id: string }[] }
  ).data.map((r) => r.id);

describe("request ids", () => {
  it("the OpenAI SDK's _request_id is the id of the request's row in every listing", async () => {
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const completion = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "hello" }],
    });
    const id = completion._request_id;
    expect(id).toMatch(/^req_[\w-]+$/);
    expect(await usageIds()).toContain(id);
    expect(await adminIds()).toContain(id);
    const owner = await ownerSession(gw);
    const page = await (
      await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })
    ).text();
    expect(page).toContain(id);
  });

  it("the Anthropic SDK's _request_id (request-id) is the same id as x-request-id and the row's", async () => {
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const message = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 50,
      messages: [{ role: "user", content: "hello" }],
    });
    expect(message._request_id).toMatch(/^req_[\w-]+$/);
    expect(await usageIds()).toContain(message._request_id);
    const raw = await post(gw, "/v1/messages", {
      model: "mock-gpt",
      max_tokens: 50,
      messages: [{ role: "user", content: "hello" }],
    });
    expect(raw.headers.get("request-id")).toBe(raw.headers.get("x-request-id"));
    await raw.text();
  });

  it("a streamed answer, a refusal before admission and a 401 carry an id too; each id is new", async () => {
    const streamed = await post(
      gw,
      "/v1/chat/completions",
      chat("hi", "mock-gpt", { stream: true }),
    );
    await streamed.text();
    const unknownModel = await post(gw, "/v1/messages", {
      model: "mock-nope",
      max_tokens: 5,
      messages: [{ role: "user", content: "hi" }],
    });
    await unknownModel.text();
    const noKey = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", body: "{}" });
    await noKey.text();
    const models = await fetch(`${gw.url}/v1/models`);
    await models.text();
    const ids = [streamed, unknownModel, noKey, models].map((r) => r.headers.get("x-request-id"));
    for (const id of ids) expect(id).toMatch(/^req_[\w-]+$/);
    expect(new Set(ids).size).toBe(4);
    expect(unknownModel.status).toBe(400);
    expect(unknownModel.headers.get("request-id")).toBe(ids[1]);
    expect(noKey.status).toBe(401);
    expect(await usageIds()).toContain(ids[0]);
  });

  it("the SDKs read the id of an error too", async () => {
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const err = await openai.chat.completions
      .create({ model: "mock-nope", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e as InstanceType<typeof OpenAI.APIError>);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).requestID).toMatch(/^req_[\w-]+$/);
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const refused = await anthropic.messages
      .create({ model: "mock-nope", max_tokens: 5, messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e as InstanceType<typeof Anthropic.APIError>);
    expect(refused).toBeInstanceOf(Anthropic.APIError);
    expect((refused as InstanceType<typeof Anthropic.APIError>).requestID).toMatch(/^req_[\w-]+$/);
  });
});
