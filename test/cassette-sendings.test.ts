import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type OpenAI from "openai";
import { describe, expect, it, vi } from "vitest";
import { type CassetteOptions, ConfigError } from "../src/index.js";
import { useCassetteSuite } from "./support/cassette-suite.js";
import { runCli } from "./support/cli.js";
import {
  type FakeUpstream,
  openaiJson,
  openaiStreamSteps,
  type Reply,
} from "./support/fake-upstream.js";

/**
 * A user's suite recording its provider's answers to cassettes and replaying them offline, where
 * the recording meets what a suite does: the same request sent by two tests, a folder it cannot
 * write, and a key in what the app sends.
 */

const KEY = "kn-suite-app-key-000000000000000000";
const PROVIDER_KEY = "sk-provider-cassette-secret-4242";

let root: string;
let upstream: FakeUpstream;
const {
  config,
  start: startApp,
  closeStarted,
  client,
} = useCassetteSuite({ key: KEY, providerKey: PROVIDER_KEY }, (started) => {
  ({ root, upstream } = started);
});

async function gateway(cassettes: CassetteOptions, baseUrl?: string) {
  return client(await startApp(cassettes, baseUrl));
}

/** A provider that gives each request a different answer, as a sampling model does. */
function answersInTurn(prefix: string) {
  let turn = 0;
  return (req: { body: Record<string, unknown> }): Reply => {
    turn++;
    if (!req.body.stream) return openaiJson(`${prefix} ${turn}`, { usage: [10, turn] });
    return { kind: "sse", steps: openaiStreamSteps([prefix, ` ${turn}`], { usage: [10, turn] }) };
  };
}

const question = { model: "app-chat", messages: [{ role: "user" as const, content: "Pick one" }] };

async function ask(openai: OpenAI) {
  const answer = await openai.chat.completions.create(question);
  return [answer.choices[0].message.content, answer.usage?.completion_tokens];
}

async function askStreamed(openai: OpenAI) {
  const stream = await openai.chat.completions.create({
    ...question,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let tokens: number | undefined;
  for await (const part of stream) {
    text += part.choices[0]?.delta?.content ?? "";
    tokens = part.usage?.completion_tokens ?? tokens;
  }
  return [text, tokens];
}

describe("the same request sent by two tests", () => {
  it("replayed offline, each sending gets what it was answered while recording; a later one the last", async () => {
    const dir = join(root, "two-tests");
    upstream.handle(answersInTurn("answer"));
    const recording = await gateway({ dir, mode: "record" });
    // Two tests, each sending the request once whole and once streamed.
    const recorded = [
      await ask(recording),
      await askStreamed(recording),
      await ask(recording),
      await askStreamed(recording),
    ];
    expect(recorded.map(([text]) => text)).toEqual([
      "answer 1",
      "answer 2",
      "answer 3",
      "answer 4",
    ]);
    expect(readdirSync(dir)).toHaveLength(4);

    const replaying = await gateway({ dir, mode: "replay" }, "http://127.0.0.1:9/v1");
    const calls = upstream.requests.length;
    const replayed = [
      await ask(replaying),
      await askStreamed(replaying),
      await ask(replaying),
      await askStreamed(replaying),
    ];
    expect(replayed).toEqual(recorded);
    expect(await ask(replaying)).toEqual(recorded[2]);
    expect(upstream.requests).toHaveLength(calls);
  });

  it("recorded again with one sending, the replay repeats that one: the earlier recording's later sendings are gone", async () => {
    const dir = join(root, "recorded-again");
    upstream.handle(answersInTurn("first recording"));
    const first = await gateway({ dir, mode: "record" });
    await ask(first);
    await ask(first);
    // That run is over before the next records (a recording records alone).
    await closeStarted();
    upstream.handle(answersInTurn("second recording"));
    const second = await gateway({ dir, mode: "record" });
    expect(await ask(second)).toEqual(["second recording 1", 1]);

    const replaying = await gateway({ dir, mode: "replay" }, "http://127.0.0.1:9/v1");
    expect(await ask(replaying)).toEqual(["second recording 1", 1]);
    expect(await ask(replaying)).toEqual(["second recording 1", 1]);
    expect(readdirSync(dir)).toHaveLength(1);
  });
});

describe("a cassette folder the gateway cannot use", () => {
  const start = (cassettes: CassetteOptions) => startApp(cassettes, "http://127.0.0.1:9/v1");

  it("a file, or a path through one, is refused at start-up in every mode, naming it", async () => {
    const file = join(root, "not-a-folder");
    writeFileSync(file, "");
    for (const mode of ["record", "record-missing", "replay"] as const) {
      const refused = await start({ dir: file, mode }).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(ConfigError);
      expect((refused as Error).message).toContain(`dir: ${file} is not a directory`);
    }
    const under = join(file, "cassettes");
    const refused = await start({ dir: under, mode: "record" }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toContain(`dir: ${under} cannot be made (ENOTDIR)`);
  });

  it("gateway serve --record on a file says so in one line, not as a crash to report", async () => {
    const file = join(root, "serve-not-a-folder");
    writeFileSync(file, "");
    const configFile = join(root, "serve.json");
    writeFileSync(configFile, JSON.stringify(config("http://127.0.0.1:9/v1")));
    for (const flags of [
      ["--record", file],
      ["--replay", file],
    ]) {
      const result = await runCli(
        ["serve", "--port", "0", "--db", ":memory:", "--config", configFile, ...flags],
        process.env,
      );
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`dir: ${file} is not a directory`);
      expect(result.stderr).not.toMatch(/unexpected error|report/i);
    }
  });

  it.skipIf(process.getuid?.() === 0)(
    "a folder it may not write into is refused at start-up for a recording (not run as root, who may write anywhere)",
    async () => {
      const dir = mkdtempSync(join(root, "read-only-"));
      const { chmodSync } = await import("node:fs");
      chmodSync(dir, 0o500);
      const refused = await start({ dir, mode: "record" }).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(ConfigError);
      expect((refused as Error).message).toContain(`dir: ${dir} is not writable`);
    },
  );

  it("one that goes away while recording: the app still gets its provider's answers, charged as usual, and stderr says what was not recorded", async () => {
    const dir = join(root, "gone");
    upstream.handle(answersInTurn("kept"));
    const lines: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      lines.push(args.join(" "));
    });
    try {
      const gw = await startApp({ dir, mode: "record" });
      const openai = client(gw);
      rmSync(dir, { recursive: true });
      writeFileSync(dir, "");
      expect(await ask(openai)).toEqual(["kept 1", 1]);
      expect(await askStreamed(openai)).toEqual(["kept 2", 2]);
      const rows = await gw.listRequests();
      expect(rows.map((r) => [r.status, r.error_code])).toEqual([
        [200, null],
        [200, null],
      ]);
      expect(rows.every((r) => r.cost_micro > 0)).toBe(true);
    } finally {
      spy.mockRestore();
    }
    expect(lines).toHaveLength(2);
    for (const line of lines) expect(line).toMatch(/^cassettes: could not write .* not recorded$/);
  });
});

describe("a request that carries a key", () => {
  it("its cassette's name and text hold none, and the replay still answers it", async () => {
    const dir = join(root, "keys");
    upstream.handle(answersInTurn("no secrets"));
    const body = {
      model: "app-chat",
      messages: [
        { role: "user" as const, content: `My keys are ${KEY} and ${PROVIDER_KEY}, keep them` },
      ],
    };
    const recording = await gateway({ dir, mode: "record" });
    const recorded = await recording.chat.completions.create(body);
    const [file] = readdirSync(dir);
    const text = readFileSync(join(dir, file), "utf8");
    // Not even in part, nor lower-cased as a file name's words are.
    for (const held of [file.toLowerCase(), text.toLowerCase()]) {
      expect(held).not.toContain("suite-app-key");
      expect(held).not.toContain("provider-cassette");
    }

    const replaying = await gateway({ dir, mode: "replay" }, "http://127.0.0.1:9/v1");
    const replayed = await replaying.chat.completions.create(body);
    expect(replayed.choices[0].message.content).toBe(recorded.choices[0].message.content);
  });
});
