import { describe, expect, it } from "vitest";
import type { ChatCompletionRequest } from "../../wire/openai-types.js";
import { FunctionNames } from "./function-names.js";

const geminiTakes = /^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/;

const withTools = (...names: string[]): ChatCompletionRequest => ({
  model: "gemini-2.5-flash",
  messages: [{ role: "user", content: "hi" }],
  tools: names.map((name) => ({ type: "function" as const, function: { name } })),
});

describe("FunctionNames", () => {
  it("keeps a name Gemini takes, and gives every other one a name it takes, each its own, both ways", () => {
    const long = `x${"y".repeat(99)}`;
    const clientNames = ["get_weather", "2fa-check", "_2fa-check", "-dash", long, `${long}z`];
    const names = FunctionNames.of(withTools(...clientNames));
    const sent = clientNames.map((name) => names.toGemini(name));
    expect(sent.slice(0, 3)).toEqual(["get_weather", "_2fa-check_2", "_2fa-check"]);
    for (const name of sent) expect(name).toMatch(geminiTakes);
    expect(new Set(sent).size).toBe(clientNames.length);
    expect(sent.map((name) => names.toClient(name))).toEqual(clientNames);
  });

  it("maps the names in the history and the tool choice the same way as the tools", () => {
    const chat: ChatCompletionRequest = {
      model: "gemini-2.5-flash",
      messages: [
        { role: "user", content: "go" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "c1", type: "function", function: { name: "9-lives", arguments: "{}" } },
          ],
        },
        { role: "tool", tool_call_id: "c1", content: "ok" },
      ],
      tool_choice: { type: "function", function: { name: "3d-print" } },
    };
    const names = FunctionNames.of(chat);
    expect(names.toGemini("9-lives")).toBe("_9-lives");
    expect(names.toGemini("3d-print")).toBe("_3d-print");
    expect(names.toClient("_9-lives")).toBe("9-lives");
    // A name the model made up is passed on as it is.
    expect(names.toClient("other")).toBe("other");
  });
});
