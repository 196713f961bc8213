import { describe, expect, it } from "vitest";
import { MockScript, mockRuleSchema } from "./mock-script.js";

const ask = (text: string, extra: object = {}) => ({
  messages: [{ role: "user", content: text }],
  ...extra,
});

describe("MockScript", () => {
  it("tries rules in order and falls back (undefined) when none matches", () => {
    const script = new MockScript();
    script.add([
      { match: { user_text: "weather" }, reply: { text: "sunny" } },
      { reply: { text: "anything" }, match: { model: "other" } },
    ]);
    expect(script.answers(["mock-gpt"], ask("what is the weather"))?.[0].text()).toBe("sunny");
    expect(script.answers(["mock-gpt"], ask("hello"))).toBeUndefined();
    expect(script.answers(["other"], ask("hello"))?.[0].text()).toBe("anything");
  });

  it("uses a rule `times` times, then the next rule answers", () => {
    const script = new MockScript();
    script.add([{ reply: { text: "first" }, times: 1 }, { reply: { text: "later" } }]);
    expect(script.answers(["m"], ask("x"))?.[0].text()).toBe("first");
    expect(script.answers(["m"], ask("x"))?.[0].text()).toBe("later");
    expect(script.answers(["m"], ask("x"))?.[0].text()).toBe("later");
  });

  it("matches the last user text by regex, tool results and offered tools", () => {
    const script = new MockScript();
    script.add([
      { match: { tool_result: true }, reply: { text: "after tool" } },
      {
        match: { tools_offered: "get_weather" },
        reply: { tool_calls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
      },
      { match: { user_text: { regex: "^order #\\d+$", flags: "i" } }, reply: { text: "order" } },
    ]);
    expect(script.answers(["m"], ask("ORDER #12"))?.[0].text()).toBe("order");
    expect(script.answers(["m"], ask("order #12 please"))).toBeUndefined();
    const tools = [{ type: "function", function: { name: "get_weather" } }];
    const [call] = script.answers(["m"], ask("weather?", { tools })) ?? [];
    expect(call?.toolCalls).toEqual([
      { id: expect.stringMatching(/^call_/), name: "get_weather", arguments: '{"city":"Oslo"}' },
    ]);
    expect(call?.finishReason).toBe("tool_calls");
    const [after] =
      script.answers(["m"], {
        messages: [
          { role: "user", content: "weather?" },
          { role: "assistant", content: null, tool_calls: [] },
          { role: "tool", content: "12C" },
        ],
        tools,
      }) ?? [];
    expect(after?.text()).toBe("after tool");
  });

  it("carries usage, errors, delay and break into the plan", () => {
    const script = new MockScript();
    script.add([
      {
        reply: {
          text: "t",
          usage: { input_tokens: 7, output_tokens: 9 },
          error: { status: 413, reason: "context_length_exceeded" },
          delay_ms: 5,
          break_after: 2,
        },
      },
    ]);
    const [plan] = script.answers(["m"], ask("x")) ?? [];
    expect(plan).toMatchObject({
      inputTokens: 7,
      outputTokens: 9,
      directives: { fail: 413, reject: "context_length_exceeded", delay: 5, break: 2 },
    });
  });

  it("reset comes back to the baseline with its uses restored", () => {
    const script = new MockScript();
    script.setBaseline([{ reply: { text: "base" }, times: 1 }]);
    script.add([{ match: { user_text: "x" }, reply: { text: "added" } }]);
    expect(script.answers(["m"], ask("y"))?.[0].text()).toBe("base");
    expect(script.answers(["m"], ask("y"))).toBeUndefined();
    script.reset();
    expect(script.answers(["m"], ask("x"))?.[0].text()).toBe("base");
    expect(script.list()).toEqual([]);
    script.replace([{ reply: { text: "only" } }]);
    expect(script.answers(["m"], ask("x"))?.[0].text()).toBe("only");
  });

  it("rejects a rule with a bad regex or an unknown field, naming it", () => {
    const bad = mockRuleSchema.safeParse({ match: { user_text: { regex: "(" } }, reply: {} });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0].path).toEqual(["match", "user_text", "regex"]);
    const unknown = mockRuleSchema.safeParse({ reply: { txt: "typo" } });
    expect(unknown.success).toBe(false);
  });
});
