import { describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import { anyStyleHeaders } from "./support/every-wire.js";
import { deferred, type SseStep } from "./support/fake-upstream.js";
import { backends, post } from "./support/gateway.js";
import { type MeterWires, useMeterWires } from "./support/meter-wires.js";
import {
  deliveredTokens,
  type Logged,
  logged,
  outputIn,
  requestTextTokens,
} from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * The meter on a stream whose pieces the gateway holds until they are whole: a strict tool's call
 * arguments, or a strict structured output, with optional properties toward OpenAI's chat (whose
 * strict mode answers them null, which the gateway takes back out once it has the whole JSON;
 * src/server/wire/translate/strict-nulls.ts). A messages, Responses and chat-on-route client that
 * leaves while a call's arguments are held, after they were written, or while a structured output
 * is held; a provider stream that breaks, or ends cleanly but unfinished, while a call or an
 * output is held; `n: 2` with two strict calls interleaved across the choices. Each time: one
 * request-log row, the request's, charged the price of its usage, that usage what was written to
 * the client (the held part never: docs/metering.md), the balance moved by that once, and nothing
 * held after. On SQLite and Postgres.
 *
 * The fake stops at a gated step until the client has gone, so what the gateway wrote is known;
 * OpenAI reports its usage at the end only, so a client that leaves is billed the input's estimate
 * and what it was written.
 */

const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;

type Style = "chat" | "messages" | "responses";
const styles: Style[] = ["chat", "messages", "responses"];

/** `note` is optional: OpenAI's strict mode gets it required and nullable, and answers it null. */
const schema = {
  type: "object",
  properties: { city: { type: "string" }, note: { type: "string" } },
  required: ["city"],
  additionalProperties: false,
};

const TEXT = "Let me look that up for you. ";
const THOUGHT = "Which city did they mean here? ";
const NAME = "lookup";
/** The first call's arguments as the model writes them, and as the client gets them. */
const ARGS = ['{"city":"Jak', 'arta","note":', "null}"];
const ARGS_SHOWN = '{"city":"Jakarta"}';
/** The second call's: nothing to take out. */
const ARGS2 = ['{"city":"Band', 'ung","note":"rain"}'];
const ARGS2_SHOWN = '{"city":"Bandung","note":"rain"}';
/** A structured output as the model writes it. */
const OUTPUT = ['{"city":"Ja', 'karta","note', '":null}'];

/** An OpenAI chat chunk of the given choices' deltas. */
function chunk(
  ...choices: { index?: number; delta: object; finish?: string }[]
): SseStep & { data: object } {
  return {
    data: {
      id: "chatcmpl-up",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-up",
      choices: choices.map(({ index = 0, delta, finish }) => ({
        index,
        delta,
        logprobs: null,
        finish_reason: finish ?? null,
      })),
    },
  };
}
const role = (index = 0) => ({ index, delta: { role: "assistant", content: "" } });
const text = (content: string, index = 0) => ({ index, delta: { content } });
const thought = (reasoning_content: string) => ({ delta: { reasoning_content } });
const callStart = (at: number, id: string, index = 0) => ({
  index,
  delta: {
    tool_calls: [{ index: at, id, type: "function", function: { name: NAME, arguments: "" } }],
  },
});
const callArgs = (at: number, piece: string, index = 0) => ({
  index,
  delta: { tool_calls: [{ index: at, function: { arguments: piece } }] },
});
const finish = (reason: string, index = 0) => ({ index, delta: {}, finish: reason });
const usage = (prompt: number, completion: number): SseStep => ({
  data: {
    id: "chatcmpl-up",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "gpt-up",
    choices: [],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
    },
  },
});

/** The request of `style` with a strict tool (`kind: "tool"`) or a strict structured output. */
function requestOf(style: Style, kind: "tool" | "output", extra: object = {}) {
  const prompt = "Where is it?";
  if (style === "chat")
    return {
      path: "/v1/chat/completions",
      body: {
        model: "r-strict",
        stream: true,
        max_tokens: 500,
        messages: [{ role: "user", content: prompt }],
        ...(kind === "tool"
          ? {
              tools: [
                { type: "function", function: { name: NAME, parameters: schema, strict: true } },
              ],
            }
          : {
              response_format: {
                type: "json_schema",
                json_schema: { name: "place", schema, strict: true },
              },
            }),
        ...extra,
      },
    };
  if (style === "messages")
    return {
      path: "/v1/messages",
      body: {
        model: "m-openai",
        stream: true,
        max_tokens: 500,
        messages: [{ role: "user", content: prompt }],
        ...(kind === "tool"
          ? { tools: [{ name: NAME, strict: true, input_schema: schema }] }
          : { output_config: { format: { type: "json_schema", schema } } }),
      },
    };
  return {
    path: "/v1/responses",
    body: {
      model: "m-openai",
      stream: true,
      max_output_tokens: 500,
      input: prompt,
      // Shown the thinking, so that it is output the client was written.
      reasoning: { summary: "auto" },
      ...(kind === "tool"
        ? { tools: [{ type: "function", name: NAME, parameters: schema, strict: true }] }
        : { text: { format: { type: "json_schema", name: "place", schema, strict: true } } }),
    },
  };
}

interface Read {
  requestId: string | null;
  status: number;
  /** Output the client read (`outputIn`), in order. */
  read: string[];
  events: { event?: string; data: unknown }[];
}

/**
 * Sends the request and reads its stream until `leaves` says so (then hangs up) or it ends; at most
 * 5 s, so a point never reached fails the test rather than hanging it.
 */
async function readStream(
  wires: MeterWires,
  style: Style,
  request: { path: string; body: object },
  leaves?: (read: Read) => boolean,
): Promise<Read> {
  const abort = new AbortController();
  const res = await post(wires.gw, request.path, request.body, anyStyleHeaders, abort.signal);
  const out: Read = {
    requestId: res.headers.get("x-request-id"),
    status: res.status,
    read: [],
    events: [],
  };
  const bound = setTimeout(() => abort.abort(), 5_000);
  try {
    for await (const { event, data } of streamEvents(res)) {
      out.events.push({ event, data });
      if (data !== "[DONE]") out.read.push(...outputIn(style, event, data));
      if (leaves?.(out)) break;
    }
  } catch (err) {
    if (!abort.signal.aborted) throw err;
  } finally {
    clearTimeout(bound);
    abort.abort();
  }
  return out;
}

/** The request's row once it is settled as `code`, and every row of its id; at most 10 s. */
async function rowOf(wires: MeterWires, id: string | null, code: string | null) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = (await logged(wires.gw)).filter((row) => row.id === id);
    if ((rows.length > 0 && rows[0].error_code === code) || Date.now() > deadline) return rows;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const price = (usage: Logged["usage"]) =>
  usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT;

/** Whether the client read all of `texts`, in order, as the last output it read so far. */
const readUpTo = (read: string[], ...texts: string[]) => read.join("").endsWith(texts.join(""));

describe.each(backends)("held strict pieces, metered on %s", (backend) => {
  let wires: MeterWires;
  useMeterWires(
    backend,
    {
      openaiKey: "sk-oa",
      inputPerMtok: PRICE_IN,
      outputPerMtok: PRICE_OUT,
      routes: [{ name: "r-strict", steps: ["m-openai"] }],
    },
    (ready) => (wires = ready),
  );

  /**
   * The request's one row, charged the price of `output` tokens (what was written) and the input's
   * estimate, settled as `code`; the balance down by that once; nothing held.
   */
  async function billedOnce(
    out: Read,
    was: { balance: number },
    code: string,
    output: number,
  ): Promise<Logged> {
    const rows = await rowOf(wires, out.requestId, code);
    const context = JSON.stringify({ out, rows });
    expect(rows, context).toHaveLength(1);
    const [row] = rows;
    expect(row.error_code, context).toBe(code);
    expect(row.usage, context).toEqual({
      input_tokens: requestTextTokens(wires.openai.last.body),
      output_tokens: output,
    });
    expect(row.cost_micro, context).toBe(price(row.usage));
    const after = await idleMoney(wires.gw);
    expect(after.held, context).toBe(0);
    expect(was.balance - after.balance, context).toBe(row.cost_micro);
    return row;
  }

  it.for(styles)(
    "%s: a client that leaves while a strict call's arguments are held is billed its text and the call's name, never the held arguments",
    async (style) => {
      const gone = deferred();
      wires.openai.queue({
        kind: "sse",
        steps: [
          chunk(role()),
          chunk(text(TEXT)),
          chunk(callStart(0, "call_1")),
          chunk(callArgs(0, ARGS[0])),
          chunk(callArgs(0, ARGS[1])),
          { ...chunk(callArgs(0, ARGS[2])), gate: gone.promise },
          chunk(finish("tool_calls")),
          usage(20, 30),
          { data: "[DONE]" },
        ],
      });
      const was = await money(wires.gw);
      const out = await readStream(wires, style, requestOf(style, "tool"), ({ read }) =>
        readUpTo(read, NAME),
      );
      try {
        expect(out.status).toBe(200);
        expect(out.read).toEqual([TEXT, NAME]);
        await billedOnce(out, was, "client_closed", deliveredTokens([TEXT + NAME]));
      } finally {
        gone.resolve();
      }
    },
  );

  it.for(styles)(
    "%s: a client that leaves after a strict call's arguments were written is billed them, whole and without the nulls",
    async (style) => {
      const gone = deferred();
      wires.openai.queue({
        kind: "sse",
        steps: [
          chunk(role()),
          chunk(text(TEXT)),
          chunk(callStart(0, "call_1")),
          ...ARGS.map((piece) => chunk(callArgs(0, piece))),
          // The second call begins: the first is whole, and its arguments go out.
          chunk(callStart(1, "call_2")),
          { ...chunk(callArgs(1, ARGS2[0])), gate: gone.promise },
          chunk(callArgs(1, ARGS2[1])),
          chunk(finish("tool_calls")),
          usage(20, 30),
          { data: "[DONE]" },
        ],
      });
      const was = await money(wires.gw);
      const out = await readStream(wires, style, requestOf(style, "tool"), ({ read }) =>
        readUpTo(read, ARGS_SHOWN, NAME),
      );
      try {
        expect(out.read).toEqual([TEXT, NAME, ARGS_SHOWN, NAME]);
        await billedOnce(
          out,
          was,
          "client_closed",
          deliveredTokens([TEXT + NAME + ARGS_SHOWN + NAME]),
        );
      } finally {
        gone.resolve();
      }
    },
  );

  it.for(styles)(
    "%s: a client that leaves while a structured output is held is billed the thinking it was shown, never the held text",
    async (style) => {
      const gone = deferred();
      wires.openai.queue({
        kind: "sse",
        steps: [
          chunk(role()),
          chunk(thought(THOUGHT)),
          chunk(text(OUTPUT[0])),
          chunk(text(OUTPUT[1])),
          { ...chunk(text(OUTPUT[2])), gate: gone.promise },
          chunk(finish("stop")),
          usage(20, 30),
          { data: "[DONE]" },
        ],
      });
      const was = await money(wires.gw);
      const out = await readStream(wires, style, requestOf(style, "output"), ({ read }) =>
        readUpTo(read, THOUGHT),
      );
      try {
        expect(out.read).toEqual([THOUGHT]);
        await billedOnce(out, was, "client_closed", deliveredTokens([THOUGHT]));
      } finally {
        gone.resolve();
      }
    },
  );

  for (const end of ["destroy", "close"] as const) {
    const how = end === "destroy" ? "breaks" : "ends without its finish";
    it.for(styles)(
      `%s: a provider stream that ${how} while a strict call's arguments are held ends in the style's error, with no half call, billed what was written`,
      async (style) => {
        wires.openai.queue({
          kind: "sse",
          steps: [
            chunk(role()),
            chunk(text(TEXT)),
            chunk(callStart(0, "call_1")),
            chunk(callArgs(0, ARGS[0])),
            chunk(callArgs(0, ARGS[1])),
            ...(end === "close" ? [{ data: "[DONE]" }] : []),
          ],
          end,
        });
        const was = await money(wires.gw);
        const out = await readStream(wires, style, requestOf(style, "tool"));
        expect(out.status).toBe(200);
        // The call's name, never a piece of its arguments.
        expect(out.read).toEqual([TEXT, NAME]);
        expectStreamError(style, out);
        await billedOnce(out, was, "upstream_error", deliveredTokens([TEXT + NAME]));
      },
    );

    it.for(styles)(
      `%s: a provider stream that ${how} while a structured output is held ends in the style's error, with no piece of the output, billed what was written`,
      async (style) => {
        wires.openai.queue({
          kind: "sse",
          steps: [
            chunk(role()),
            chunk(thought(THOUGHT)),
            chunk(text(OUTPUT[0])),
            chunk(text(OUTPUT[1])),
            ...(end === "close" ? [{ data: "[DONE]" }] : []),
          ],
          end,
        });
        const was = await money(wires.gw);
        const out = await readStream(wires, style, requestOf(style, "output"));
        expect(out.status).toBe(200);
        expect(out.read).toEqual([THOUGHT]);
        expectStreamError(style, out);
        await billedOnce(out, was, "upstream_error", deliveredTokens([THOUGHT]));
      },
    );
  }

  /** Two strict calls, one in each of `n: 2` answers, their pieces interleaved. */
  const interleaved = (gate?: Promise<unknown>): SseStep[] => [
    chunk(role(0), role(1)),
    chunk(callStart(0, "call_a", 0)),
    chunk(callStart(0, "call_b", 1)),
    chunk(callArgs(0, ARGS[0], 0)),
    chunk(callArgs(0, ARGS2[0], 1)),
    chunk(callArgs(0, ARGS[1], 0)),
    chunk(callArgs(0, ARGS[2], 0)),
    chunk(finish("tool_calls", 0)),
    { ...chunk(callArgs(0, ARGS2[1], 1)), gate },
    chunk(finish("tool_calls", 1)),
    usage(20, 30),
    { data: "[DONE]" },
  ];
  /** Each answer's call arguments as the client read them, piece by piece. */
  const argumentsByAnswer = (out: Read) => {
    const by: string[][] = [[], []];
    for (const { data } of out.events)
      for (const choice of (
        data as {
          choices?: {
            index: number;
            delta?: { tool_calls?: { function?: { arguments?: string } }[] };
          }[];
        }
      ).choices ?? [])
        for (const call of choice.delta?.tool_calls ?? [])
          if (call.function?.arguments) by[choice.index].push(call.function.arguments);
    return by;
  };

  it("chat n: 2, two strict calls interleaved across the answers: each answer's arguments whole, in one piece, without the nulls; billed the provider's usage", async () => {
    wires.openai.queue({ kind: "sse", steps: interleaved() });
    const was = await money(wires.gw);
    const out = await readStream(wires, "chat", requestOf("chat", "tool", { n: 2 }));
    expect(
      out.events.at(-1)?.data,
      JSON.stringify({
        events: out.events,
        refused: wires.openai.refused,
        sent: wires.openai.last.body,
      }),
    ).toBe("[DONE]");
    expect(argumentsByAnswer(out)).toEqual([[ARGS_SHOWN], [ARGS2_SHOWN]]);
    const rows = await rowOf(wires, out.requestId, null);
    expect(rows).toHaveLength(1);
    expect(rows[0].usage).toEqual({ input_tokens: 20, output_tokens: 30 });
    const after = await idleMoney(wires.gw);
    expect(after.held).toBe(0);
    expect(was.balance - after.balance).toBe(price(rows[0].usage));
  });

  it("chat n: 2: a client that leaves once one answer's call was written and the other's is held is billed what was written", async () => {
    const gone = deferred();
    wires.openai.queue({ kind: "sse", steps: interleaved(gone.promise) });
    const was = await money(wires.gw);
    const out = await readStream(wires, "chat", requestOf("chat", "tool", { n: 2 }), ({ read }) =>
      readUpTo(read, ARGS_SHOWN),
    );
    try {
      expect(out.read).toEqual([NAME, NAME, ARGS_SHOWN]);
      expect(argumentsByAnswer(out)).toEqual([[ARGS_SHOWN], []]);
      await billedOnce(out, was, "client_closed", deliveredTokens([NAME, NAME, ARGS_SHOWN]));
    } finally {
      gone.resolve();
    }
  });
});

/** The stream ended in its style's error event, not its clean end. */
function expectStreamError(style: Style, out: Read): void {
  const context = JSON.stringify(out.events);
  const last = out.events.at(-1);
  if (style === "chat") {
    expect(
      out.events.some(({ data }) => data === "[DONE]"),
      context,
    ).toBe(false);
    const data = last?.data as { error?: { code?: string } } | undefined;
    expect(data?.error?.code, context).toBe("upstream_error");
  } else if (style === "messages") {
    expect(last?.event, context).toBe("error");
    expect(
      out.events.some(({ event }) => event === "message_stop"),
      context,
    ).toBe(false);
  } else {
    expect(last?.event, context).toBe("response.failed");
    expect(
      out.events.some(({ event }) => event === "response.completed"),
      context,
    ).toBe(false);
  }
}
