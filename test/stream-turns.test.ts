import { createHook } from "node:async_hooks";
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  anthropicStreamSteps,
  deferred,
  type FakeUpstream,
  fakeUpstream,
  type SseStep,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * A streamed chunk reaches the client in the event-loop turn after the upstream's bytes arrive,
 * not some turns later. Counted, not timed: the gateway runs in this process, and the test counts
 * the turns (setImmediate ticks) between the upstream's write of a chunk and the client socket
 * receiving it. Each extra turn a chunk waits is time every token of every stream pays.
 *
 * A turn is coarse: an immediate scheduled while the loop polls sockets runs in the same turn, after
 * every other socket's callback, so a chunk deferred that way would still count one turn. The
 * test also counts the callbacks of immediates and timers that anyone but the test scheduled
 * while a chunk was on its way: the gateway writes a chunk in the callback that read it, so none.
 */

let openai: FakeUpstream;
let anthropic: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  openai = await fakeUpstream("openai");
  anthropic = await fakeUpstream("anthropic");
  const prices = { price_input_per_mtok: 10_000, price_output_per_mtok: 20_000 };
  gw = await testGateway({
    config: baseConfig({
      providers: [
        { id: "oa", wire: "openai", base_url: openai.baseUrl, api_keys: ["sk-oa"] },
        { id: "an", wire: "anthropic", base_url: anthropic.baseUrl, api_keys: ["sk-an"] },
      ],
      models: [
        { name: "oa-model", provider: "oa", upstream_model: "gpt-upstream", ...prices },
        { name: "an-model", provider: "an", upstream_model: "claude-upstream", ...prices },
      ],
      routes: [],
    }),
  });
});

afterAll(async () => {
  await gw?.close();
  await openai?.close();
  await anthropic?.close();
});

/** Immediates and timers the test schedules itself, which `deferrals` does not count. */
let ownScheduling = false;
function own<T>(schedule: () => T): T {
  ownScheduling = true;
  try {
    return schedule();
  } finally {
    ownScheduling = false;
  }
}

/**
 * Counts, while `watching`, the callbacks of immediates and timers scheduled by anyone but the
 * test: a chunk held back for one of them waits behind every other callback of the loop.
 */
const deferrals = { watching: false, ran: 0, scheduled: new Set<number>() };
const hook = createHook({
  init(id, type) {
    if (deferrals.watching && !ownScheduling && (type === "Immediate" || type === "Timeout"))
      deferrals.scheduled.add(id);
  },
  before(id) {
    if (deferrals.scheduled.delete(id)) deferrals.ran++;
  },
});

/** Counts event-loop turns, and others' deferred callbacks, from now until `stop` is called. */
function turnCounter(): { stop: () => { turns: number; deferred: number } } {
  let turns = 0;
  let counting = true;
  const tick = () => {
    if (!counting) return;
    turns++;
    own(() => setImmediate(tick));
  };
  own(() => setImmediate(tick));
  deferrals.ran = 0;
  deferrals.watching = true;
  return {
    stop() {
      counting = false;
      deferrals.watching = false;
      return { turns, deferred: deferrals.ran };
    },
  };
}

const chunk = (delta: object, finish: string | null = null) => ({
  id: "chatcmpl-turns",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "gpt-upstream",
  choices: [{ index: 0, delta, finish_reason: finish }],
});

/**
 * A stream each style passes through as it came: its upstream, the steps that upstream writes
 * (each word's step waits for its gate), the request, and how a word reads on the client's side.
 */
const styles = {
  chat: {
    upstream: () => openai,
    steps: (words: string[], gates: Promise<void>[]): SseStep[] => [
      ...words.map((word, i) => ({ data: chunk({ content: word }), gate: gates[i] })),
      { data: chunk({}, "stop") },
      { data: "[DONE]" },
    ],
    path: "/v1/chat/completions",
    body: { model: "oa-model", stream: true },
    word: (word: string) => `"content":"${word}"`,
    end: "data: [DONE]",
  },
  messages: {
    upstream: () => anthropic,
    steps: (words: string[], gates: Promise<void>[]): SseStep[] => {
      let next = 0;
      return anthropicStreamSteps(words).map((step) =>
        step.event === "content_block_delta" ? { ...step, gate: gates[next++] } : step,
      );
    },
    path: "/v1/messages",
    body: { model: "an-model", stream: true, max_tokens: 100 },
    word: (word: string) => `"text":"${word}"`,
    end: "event: message_stop",
  },
};

/**
 * Streams an answer whose chunks the upstream writes one at a time, each when the client has
 * received the one before; returns the turns each chunk took to reach the client.
 */
async function turnsPerChunk(
  style: keyof typeof styles,
  words: string[],
): Promise<{ turns: number; deferred: number }[]> {
  const shape = styles[style];
  const upstream = shape.upstream();
  const gates = words.map(() => deferred());
  upstream.queue({
    kind: "sse",
    steps: shape.steps(
      words,
      gates.map((gate) => gate.promise),
    ),
  });
  const turns: { turns: number; deferred: number }[] = [];
  const body = JSON.stringify({
    ...shape.body,
    messages: [{ role: "user", content: "count the turns" }],
  });
  let counter: ReturnType<typeof turnCounter> | undefined;
  // The upstream writes the next chunk, and the count starts, in the same turn: always from the
  // check phase, so every chunk's count starts at the same point of the loop.
  const release = () =>
    own(() =>
      setImmediate(() => {
        const gate = gates[turns.length];
        if (!gate) return;
        counter = turnCounter();
        gate.resolve();
      }),
    );
  const headersBefore = upstream.headersSentAt.length;
  await new Promise<void>((resolve, reject) => {
    const req = request(
      `${gw.url}${shape.path}`,
      {
        method: "POST",
        agent: false,
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      },
      (res) => {
        expect(res.statusCode).toBe(200);
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (part: string) => {
          text += part;
          const word = words[turns.length];
          if (counter && word !== undefined && text.includes(shape.word(word))) {
            turns.push(counter.stop());
            counter = undefined;
            release();
          }
        });
        res.on("end", () => {
          expect(text).toContain(shape.end);
          resolve();
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
    // The gateway answers with its first chunk: release that once the upstream sent its headers
    // and the gateway had turns to spare to start waiting on the body.
    const idle = (left: number) => {
      if (upstream.headersSentAt.length === headersBefore || left > 0)
        own(() =>
          setImmediate(idle, upstream.headersSentAt.length === headersBefore ? left : left - 1),
        );
      else release();
    };
    idle(20);
  });
  return turns;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1];

describe("a streamed chunk's way through the gateway", () => {
  beforeAll(() => {
    hook.enable();
  });
  afterAll(() => {
    hook.disable();
  });

  it.each(["chat", "messages"] as const)(
    "%s: reaches the client in the turn after the upstream's bytes arrive, first and later chunks alike",
    async (style) => {
      const firsts: number[] = [];
      const laters: number[] = [];
      const firstDeferred: number[] = [];
      const laterDeferred: number[] = [];
      for (let stream = 0; stream < 5; stream++) {
        const [first, ...later] = await turnsPerChunk(style, [
          "one",
          "two",
          "three",
          "four",
          "five",
        ]);
        firsts.push(first.turns);
        firstDeferred.push(first.deferred);
        laters.push(...later.map((c) => c.turns));
        laterDeferred.push(...later.map((c) => c.deferred));
      }
      // The gateway reads the upstream's bytes and writes the chunk on in one turn; the client's
      // socket reads it in the next. A chunk held for a later turn (a setImmediate, a timer, a
      // stream adapter that defers) counts one more. Medians: on a loaded machine the kernel may
      // now and then hand loopback bytes over a turn late, whichever code runs.
      expect({ first: median(firsts), later: median(laters) }).toEqual({ first: 1, later: 1 });
      // Nor does it wait for an immediate or a timer of its own within the turn.
      expect({ first: median(firstDeferred), later: median(laterDeferred) }).toEqual({
        first: 0,
        later: 0,
      });
    },
  );
});
