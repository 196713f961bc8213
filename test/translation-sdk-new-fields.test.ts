import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { useThreeWires } from "./support/three-wires.js";

/**
 * Fields the newest SDKs added, sent to translated wires: openai 7.58's discounted Responses
 * completion windows (`background_options.completion_window` `2h` and `8h`) run queued only, and
 * OpenAI refuses them without `background: true` or with a stream. Refused alike on every wire
 * before anything is sent, rather than answered at once at the full price. The fakes refuse what
 * the real APIs refuse.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
useThreeWires({
  maxOutputTokens: 32_000,
  ready: (wires) => {
    ({ oa, an, gm, openai } = wires);
  },
});

const models = ["h-openai", "h-anthropic", "h-gemini", "mock-gpt"] as const;
const fakes = () => [oa, an, gm];
const queueAnswers = () => {
  oa.queue(openaiJson("ok"));
  an.queue(anthropicJson("ok"));
  gm.queue(geminiJson("ok"));
};
const sentBodies = () => fakes().flatMap((fake) => fake.requests.map((r) => r.raw));

async function refused(call: Promise<unknown>) {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "answered where OpenAI refuses").toBeInstanceOf(OpenAI.BadRequestError);
  return err as InstanceType<typeof OpenAI.BadRequestError>;
}

describe("Responses background_options (openai 7.58)", () => {
  it("a 2h or 8h window without background, or streamed, is refused on every wire as OpenAI refuses it, nothing sent", async () => {
    for (const model of models) {
      for (const window of ["2h", "8h"] as const) {
        queueAnswers();
        const what = `${model} ${window}`;
        const alone = await refused(
          openai.responses.create({
            model,
            input: "Hi",
            background_options: { completion_window: window },
          }),
        );
        expect(alone.code, what).toBe("invalid_request_error");
        expect(alone.message, what).toMatch(
          /`background_options.completion_window`.*`background: true`/,
        );
        const streamed = await refused(
          openai.responses.create({
            model,
            input: "Hi",
            background: true,
            stream: true,
            background_options: { completion_window: window },
          }),
        );
        expect(streamed.message, what).toMatch(/cannot be streamed/);
        expect(sentBodies(), what).toEqual([]);
        for (const fake of fakes()) fake.reset();
      }
    }
  });

  it("with background, and soonest or a continuation id alone, it is answered and no option reaches a translated wire", async () => {
    for (const model of models) {
      for (const options of [
        { background: true, background_options: { completion_window: "2h" as const } },
        { background_options: { completion_window: "soonest" as const, continuation_id: "c-1" } },
      ]) {
        queueAnswers();
        const answered = await openai.responses.create({ model, input: "Hi", ...options });
        const what = `${model} ${JSON.stringify(options)}`;
        expect(answered.status, what).toBe("completed");
        expect(
          fakes().every((fake) => fake.refused.length === 0),
          what,
        ).toBe(true);
        if (model !== "h-openai")
          for (const sent of sentBodies()) expect(sent, what).not.toContain("background");
        for (const fake of fakes()) fake.reset();
      }
    }
  });
});
