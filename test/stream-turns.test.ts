import { createHook } from "node:async_hooks";
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deferred, type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
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

let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  gw = await testGateway({
    config: baseConfig({
      providers: [{ id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-oa"] }],
      models: [
        {
          name: "oa-model",
          provider: "oa",
          upstream_model: "gpt-upstream",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 20_000,
        },
      ],
      routes: [],
    }),
  });
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
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
 * Streams a chat answer whose chunks the upstream writes one at a time, each when the client has
 * received the one before; returns the turns each chunk took to reach the client.
 */
async function turnsPerChunk(words: string[]): Promise<{ turns: number; deferred: number }[]> {
  const gates = words.map(() => deferred());
  upstream.queue({
    kind: "sse",
    steps: [
      ...words.map((word, i) => ({ data: chunk({ content: word }), gate: gates[i].promise })),
      { data: chunk({}, "stop") },
      { data: "[DONE]" },
    ],
  });
  const turns: { turns: number; deferred: number }[] = [];
  const body = JSON.stringify({
    model: "oa-model",
    stream: true,
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
      `${gw.url}/v1/chat/completions`,
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
          if (counter && word !== undefined && text.includes(`"content":"${word}"`)) {
            turns.push(counter.stop());
            counter = undefined;
            release();
          }
        });
        res.on("end", () => {
          expect(text).toContain("data: [DONE]");
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

  it("reaches the client in the turn after the upstream's bytes arrive, first and later chunks alike", async () => {
    const firsts: number[] = [];
    const laters: number[] = [];
    const firstDeferred: number[] = [];
    const laterDeferred: number[] = [];
    for (let stream = 0; stream < 5; stream++) {
      const [first, ...later] = await turnsPerChunk(["one", "two", "three", "four", "five"]);
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
  });
});
