import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";
import type { TestGateway } from "./support/gateway.js";
import { useThreeWires } from "./support/three-wires.js";

/**
 * A `tool_choice` sent without any `tools`: OpenAI's chat refuses every choice then ("'tool_choice'
 * is only allowed when 'tools' are specified"), its Responses API `required`, Anthropic's any
 * choice but `none`. Each style's refusal is the same on every wire, answered before anything is
 * sent; a translated wire would otherwise drop the choice and answer. The fakes refuse what the
 * real APIs refuse.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
let gw: TestGateway;
useThreeWires({
  maxOutputTokens: 32_000,
  ready: (wires) => {
    ({ oa, an, gm, openai, anthropic, gw } = wires);
  },
});

const models = ["h-openai", "h-anthropic", "h-gemini", "mock-gpt"] as const;
const user = (content: string) => [{ role: "user" as const, content }];
const fakes = () => [oa, an, gm];
const queueAnswers = () => {
  oa.queue(openaiJson("ok"));
  an.queue(anthropicJson("ok"));
  gm.queue(geminiJson("ok"));
};
const sent = () => fakes().reduce((n, fake) => n + fake.requests.length, 0);

type OpenAIError = InstanceType<typeof OpenAI.APIError>;
type AnthropicError = InstanceType<typeof Anthropic.APIError>;

/** The SDK error a call threw; fails the test when it was answered. */
async function refusalOf(call: Promise<unknown>): Promise<OpenAIError | AnthropicError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "answered where the client's API refuses").toBeDefined();
  return err as OpenAIError;
}

describe("a tool_choice without tools", () => {
  it("a chat client's is refused on every wire as OpenAI refuses it, nothing sent", async () => {
    const choices = ["auto", "none", "required", { type: "function", function: { name: "x" } }];
    for (const model of models) {
      for (const choice of choices) {
        queueAnswers();
        const err = await refusalOf(
          openai.chat.completions.create({
            model,
            messages: user("Hi"),
            tool_choice: choice as OpenAI.ChatCompletionToolChoiceOption,
          }),
        );
        const what = `${model} ${JSON.stringify(choice)}`;
        expect(err, what).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as OpenAIError).code, what).toBe("invalid_request_error");
        expect(err.message, what).toMatch(/`tool_choice`/);
        expect(err.message, what).toMatch(/OpenAI refuses/);
        expect(sent(), what).toBe(0);
        // Logged as a refusal, charged nothing.
        const [row] = await gw.listRequests({ limit: 1 });
        expect(row, what).toMatchObject({ status: 400, cost_micro: 0 });
        for (const fake of fakes()) fake.reset();
      }
    }
  });

  it("a messages client's auto or any is refused on every wire as Anthropic refuses it; none is answered", async () => {
    for (const model of models) {
      for (const type of ["auto", "any"] as const) {
        queueAnswers();
        const err = await refusalOf(
          anthropic.messages.create({
            model,
            max_tokens: 50,
            messages: user("Hi"),
            tool_choice: { type },
          }),
        );
        const what = `${model} ${type}`;
        expect(err, what).toBeInstanceOf(Anthropic.BadRequestError);
        expect((err as AnthropicError).error, what).toMatchObject({
          type: "error",
          error: { type: "invalid_request_error" },
        });
        expect(err.message, what).toMatch(/`tool_choice`.*Anthropic refuses/);
        expect(sent(), what).toBe(0);
        for (const fake of fakes()) fake.reset();
      }
      queueAnswers();
      const answered = await anthropic.messages.create({
        model,
        max_tokens: 50,
        messages: user("Hi"),
        tool_choice: { type: "none" },
      });
      expect(answered.type, model).toBe("message");
      expect(
        fakes().every((fake) => fake.refused.length === 0),
        model,
      ).toBe(true);
      for (const fake of fakes()) fake.reset();
    }
  });

  it("a Responses client's required is refused on every wire; auto is answered", async () => {
    for (const model of models) {
      queueAnswers();
      const err = await refusalOf(
        openai.responses.create({ model, input: "Hi", tool_choice: "required" }),
      );
      expect(err, model).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.message, model).toMatch(/`tool_choice` `required`.*OpenAI refuses/);
      expect(sent(), model).toBe(0);
      for (const fake of fakes()) fake.reset();
      queueAnswers();
      const answered = await openai.responses.create({ model, input: "Hi", tool_choice: "auto" });
      expect(answered.status, model).toBe("completed");
      for (const fake of fakes()) fake.reset();
    }
  });
});
