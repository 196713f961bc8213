import {
  cpSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { CassetteOptions } from "../src/server/kit/cassettes.js";
import { admin, quota } from "./support/api.js";
import { runCli } from "./support/cli.js";
import { fakeSpeechBytes, startFakeOpenAIMedia } from "./support/fake-openai-media.js";
import {
  anthropicStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { serveProcess } from "./support/serve-process.js";

/**
 * Record and replay: a gateway records every exchange with real (fake) providers as cassette
 * files; another gateway, with the providers gone, answers the same requests from them.
 */

const OA_KEY = "sk-oa-cassette-secret-7777";
const AN_KEY = "sk-ant-cassette-secret-8888";

function config(oa: string, an: string) {
  return baseConfig({
    providers: [
      { id: "oa", wire: "openai", base_url: oa, api_keys: [OA_KEY], timeout_ms: 3_000 },
      { id: "an", wire: "anthropic", base_url: an, api_keys: [AN_KEY], timeout_ms: 3_000 },
      // A replayed 429 cools its key as a live one does: keep that away from "oa".
      { id: "oa-rl", wire: "openai", base_url: oa, api_keys: [OA_KEY] },
    ],
    models: [
      {
        name: "gpt-x",
        provider: "oa",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      },
      {
        name: "claude-x",
        provider: "an",
        upstream_model: "claude-upstream",
        price_input_per_mtok: 30_000,
        price_output_per_mtok: 60_000,
      },
      {
        name: "gpt-rl",
        provider: "oa-rl",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
      },
    ],
    routes: [],
  });
}

/** The requests of the suite: each answered by the fake providers while recording. */
const exchanges: { name: string; path: string; body: unknown; gatewayMadeIds?: boolean }[] = [
  {
    name: "chat JSON",
    path: "/v1/chat/completions",
    body: { model: "gpt-x", messages: [{ role: "user", content: "hello there" }] },
  },
  {
    name: "chat stream",
    path: "/v1/chat/completions",
    body: {
      model: "gpt-x",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "stream me a greeting" }],
    },
  },
  {
    name: "messages stream",
    path: "/v1/messages",
    body: {
      model: "claude-x",
      max_tokens: 100,
      stream: true,
      messages: [{ role: "user", content: "say bonjour" }],
    },
  },
  {
    // The Messages answer is built by the gateway from the chat answer, with an id of its own.
    name: "messages stream to an openai-wire model (cross-wire)",
    path: "/v1/messages",
    body: {
      model: "gpt-x",
      max_tokens: 100,
      stream: true,
      messages: [{ role: "user", content: "translate me" }],
    },
    gatewayMadeIds: true,
  },
  {
    name: "messages JSON to an openai-wire model (cross-wire)",
    path: "/v1/messages",
    body: {
      model: "gpt-x",
      max_tokens: 100,
      messages: [{ role: "user", content: "translate me whole" }],
    },
    gatewayMadeIds: true,
  },
  {
    // The Responses answer is built by the gateway from the chat answer, with its own ids.
    name: "responses to a chat model (bridged)",
    path: "/v1/responses",
    body: { model: "gpt-x", input: "answer in responses" },
    gatewayMadeIds: true,
  },
  {
    name: "an upstream 429",
    path: "/v1/chat/completions",
    body: { model: "gpt-rl", messages: [{ role: "user", content: "rate limit me" }] },
  },
];

interface Answer {
  status: number;
  contentType: string | null;
  text: string;
}

async function sendAll(gw: { url: string }): Promise<Answer[]> {
  const answers: Answer[] = [];
  for (const exchange of exchanges) {
    const res = await post(gw, exchange.path, exchange.body);
    answers.push({
      status: res.status,
      contentType: res.headers.get("content-type"),
      text: await res.text(),
    });
  }
  return answers;
}

/** An answer translated from another wire with the ids and time the gateway made up left out. */
function withoutGatewayIds(text: string): string {
  return text
    .replace(/"(resp|msg)_[A-Za-z0-9]+"/g, '"$1_"')
    .replace(/"created_at":\d+/g, '"created_at":0');
}

let root: string;
let cassetteDir: string;
let oa: FakeUpstream;
let an: FakeUpstream;
let recorded: Answer[];
let recordedBalance: number;
let recordedCosts: number[];

function startWith(cassettes: CassetteOptions, urls = { oa: oa.baseUrl, an: an.baseUrl }) {
  return testGateway({ config: config(urls.oa, urls.an), keepaliveMs: 5_000, cassettes });
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "gateway-cassettes-"));
  cassetteDir = join(root, "cassettes");
  oa = await fakeUpstream("openai");
  an = await fakeUpstream("anthropic");
  oa.queue(
    openaiJson("Hi there", { usage: [12, 3] }),
    { kind: "sse", steps: openaiStreamSteps(["Hel", "lo, ", "wörld"], { usage: [9, 4] }) },
    { kind: "sse", steps: openaiStreamSteps(["tra", "duit"], { usage: [8, 2] }) },
    openaiJson("traduit en entier", { usage: [10, 5] }),
    openaiJson("une réponse", { usage: [6, 2] }),
    {
      ...openaiError(429, "Rate limit reached", "rate_limit_exceeded"),
      headers: { "retry-after": "7" },
    },
  );
  // Written apart, so the recording has several chunks to keep.
  const spaced = anthropicStreamSteps(["Bon", "jour"], { usage: [13, 5] }).map((step) => ({
    ...step,
    delayMs: 15,
  }));
  an.queue({ kind: "sse", steps: spaced });
  const gw = await startWith({ dir: cassetteDir, mode: "record" });
  try {
    recorded = await sendAll(gw);
    recordedBalance = (await quota(gw)).balance_idr;
    recordedCosts = (await gw.listRequests({ limit: exchanges.length })).map((r) => r.cost_micro);
  } finally {
    await gw.close();
  }
  expect(oa.requests).toHaveLength(6);
  expect(an.requests).toHaveLength(1);
  // The providers are gone: a replay that tried to call one would fail.
  await oa.close();
  await an.close();
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe("record", () => {
  it("answered the recorded requests as the providers did (the baseline the replay must match)", () => {
    expect(recorded.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200, 429]);
    expect(recorded[1].text).toContain("wörld");
    expect(recordedCosts.every((c) => c >= 0)).toBe(true);
    expect(recordedCosts.filter((c) => c > 0)).toHaveLength(6);
  });

  it("writes one pretty-printed, owner-only JSON file per exchange, named by slug and hash", () => {
    const files = readdirSync(cassetteDir).sort();
    expect(files).toHaveLength(exchanges.length);
    for (const file of files) expect(file).toMatch(/^[a-z0-9-]+-[0-9a-f]{8}\.json$/);
    expect(files).toContain(
      files.find((f) => f.startsWith("oa-gpt-upstream-hello-there-")) ?? "missing",
    );
    expect(files.some((f) => f.startsWith("an-claude-upstream-say-bonjour-"))).toBe(true);
    for (const file of files) {
      const text = readFileSync(join(cassetteDir, file), "utf8");
      expect(text).toContain('\n  "request": {');
      expect(statSync(join(cassetteDir, file)).mode & 0o777).toBe(0o600);
    }
  });

  it("keeps the canonical request sent upstream and the answer: JSON as JSON, a stream as timed chunks", () => {
    const files = readdirSync(cassetteDir);
    const read = (prefix: string) =>
      JSON.parse(
        readFileSync(join(cassetteDir, files.find((f) => f.startsWith(prefix)) ?? ""), "utf8"),
      );
    const json = read("oa-gpt-upstream-hello-there-");
    expect(json.request).toEqual({
      provider: "oa",
      method: "POST",
      path: "/chat/completions",
      body: { messages: [{ content: "hello there", role: "user" }], model: "gpt-upstream" },
    });
    expect(Object.keys(json.request.body)).toEqual(["messages", "model"]);
    expect(json.response.status).toBe(200);
    expect(json.response.headers["content-type"]).toContain("application/json");
    expect(json.response.body.choices[0].message.content).toBe("Hi there");

    const stream = read("an-claude-upstream-say-bonjour-");
    expect(stream.request.path).toBe("/messages");
    expect(stream.response.chunks.length).toBeGreaterThan(1);
    expect(typeof stream.response.chunks[0].ms).toBe("number");
    expect(stream.response.chunks.map((c: { text: string }) => c.text).join("")).toContain(
      "event: message_stop",
    );

    const limited = read("oa-rl-gpt-upstream-rate-limit-me-");
    expect(limited.response.status).toBe(429);
    expect(limited.response.headers["retry-after"]).toBe("7");
  });

  it("never writes a provider key, a kn- key or an Authorization header", () => {
    for (const file of readdirSync(cassetteDir)) {
      const text = readFileSync(join(cassetteDir, file), "utf8");
      expect(text).not.toContain(OA_KEY);
      expect(text).not.toContain(AN_KEY);
      expect(text).not.toContain(KEY);
      expect(text).not.toContain("kn-");
      expect(text.toLowerCase()).not.toContain("authorization");
      expect(text.toLowerCase()).not.toContain("x-api-key");
    }
  });
});

describe("replay", () => {
  let gw: TestGateway;
  // Sent and billed once, before any test: the other tests add requests of their own.
  let replayed: Answer[];
  let replayedBalance: number;
  let replayedCosts: number[];
  beforeAll(async () => {
    gw = await startWith({ dir: cassetteDir, mode: "replay" });
    replayed = await sendAll(gw);
    replayedBalance = (await quota(gw)).balance_idr;
    replayedCosts = (await gw.listRequests({ limit: exchanges.length })).map((r) => r.cost_micro);
  });
  afterAll(async () => {
    await gw?.close();
  });

  it("answers every request byte for byte as recorded, streams and cross-wire included, with the providers stopped", () => {
    for (const [i, exchange] of exchanges.entries()) {
      const same = (a: Answer) =>
        exchange.gatewayMadeIds ? { ...a, text: withoutGatewayIds(a.text) } : a;
      expect({ name: exchange.name, ...same(replayed[i]) }).toEqual({
        name: exchange.name,
        ...same(recorded[i]),
      });
    }
    expect(recorded[5].text).toContain("une réponse");
  });

  it("bills the replayed usage exactly as the recorded one (balance and each request's cost)", () => {
    expect(replayedBalance).toBe(recordedBalance);
    expect(replayedCosts).toEqual(recordedCosts);
  });

  it("fails a request with no cassette with a 400 naming the nearest cassette and the first differing field, and logs it", async () => {
    const log = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const before = (await quota(gw)).balance_idr;
      const res = await post(gw, "/v1/chat/completions", {
        model: "gpt-x",
        messages: [{ role: "user", content: "hello here" }],
      });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("bad_request");
      expect(body.error.message).toMatch(/oa-gpt-upstream-hello-there-[0-9a-f]{8}\.json/);
      expect(body.error.message).toContain("messages[0].content");
      expect(body.error.message).toContain('recorded "hello there", now "hello here"');
      expect(log).toHaveBeenCalledWith(expect.stringContaining("messages[0].content"));
      expect((await quota(gw)).balance_idr).toBe(before);
    } finally {
      log.mockRestore();
    }
  });

  it("answers a miss in the messages style on /v1/messages", async () => {
    const log = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const res = await post(gw, "/v1/messages", {
        model: "claude-x",
        max_tokens: 100,
        stream: true,
        messages: [{ role: "user", content: "say hola" }],
      });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { type: string; error: { message: string } };
      expect(body.type).toBe("error");
      expect(body.error.message).toContain("an-claude-upstream-say-bonjour-");
      expect(body.error.message).toContain("messages[0].content");
    } finally {
      log.mockRestore();
    }
  });
});

describe("record-missing", () => {
  it("replays what it has without calling the provider and records only the new exchange", async () => {
    const fresh = await fakeUpstream("openai");
    const unusedAnthropic = await fakeUpstream("anthropic");
    // A copy: the recording's own directory stays as the other tests read it.
    const dir = join(root, "record-missing");
    cpSync(cassetteDir, dir, { recursive: true });
    const gw = await startWith(
      { dir, mode: "record-missing" },
      { oa: fresh.baseUrl, an: unusedAnthropic.baseUrl },
    );
    try {
      const before = readdirSync(dir).sort();
      const old = await post(gw, exchanges[0].path, exchanges[0].body);
      expect(await old.text()).toBe(recorded[0].text);
      expect(fresh.requests).toHaveLength(0);

      fresh.queue(openaiJson("A new answer", { usage: [5, 5] }));
      const res = await post(gw, "/v1/chat/completions", {
        model: "gpt-x",
        messages: [{ role: "user", content: "something never asked" }],
      });
      expect(res.status).toBe(200);
      expect(fresh.requests).toHaveLength(1);
      const after = readdirSync(dir).sort();
      const added = after.filter((f) => !before.includes(f));
      expect(added).toHaveLength(1);
      expect(added[0]).toMatch(/^oa-gpt-upstream-something-never-asked-[0-9a-f]{8}\.json$/);

      // Asked again, it now comes from the new cassette.
      const again = await post(gw, "/v1/chat/completions", {
        model: "gpt-x",
        messages: [{ role: "user", content: "something never asked" }],
      });
      expect(
        ((await again.json()) as { choices: { message: { content: string } }[] }).choices[0].message
          .content,
      ).toBe("A new answer");
      expect(fresh.requests).toHaveLength(1);
    } finally {
      await gw.close();
      await fresh.close();
      await unusedAnthropic.close();
    }
  });
});

describe("replay timing", () => {
  it("with timing recorded, replays the recorded gaps of a stream", async () => {
    const dir = join(root, "timed");
    const slow = await fakeUpstream("openai");
    const steps = openaiStreamSteps(["a", "b"]).map((step, i) => ({
      ...step,
      delayMs: i === 2 ? 400 : 0,
    }));
    slow.queue({ kind: "sse", steps });
    const body = {
      model: "gpt-x",
      stream: true,
      messages: [{ role: "user", content: "slowly" }],
    };
    const urls = { oa: slow.baseUrl, an: slow.baseUrl };
    const recorder = await startWith({ dir, mode: "record" }, urls);
    const live = await (await post(recorder, "/v1/chat/completions", body)).text();
    await recorder.close();
    await slow.close();

    const player = await startWith({ dir, mode: "replay", timing: "recorded" }, urls);
    try {
      const started = Date.now();
      const replayed = await (await post(player, "/v1/chat/completions", body)).text();
      expect(Date.now() - started).toBeGreaterThanOrEqual(350);
      expect(replayed).toBe(live);
    } finally {
      await player.close();
    }
  });
});

describe("media routes", () => {
  const mediaConfig = (baseUrl: string) =>
    baseConfig({
      providers: [{ id: "oa-media", wire: "openai", base_url: baseUrl, api_keys: [OA_KEY] }],
      models: [
        {
          name: "up-image",
          provider: "oa-media",
          upstream_model: "gpt-image",
          modality: "image",
          price_per_unit: 500,
        },
        {
          name: "up-tts",
          provider: "oa-media",
          upstream_model: "tts-1",
          modality: "speech",
          price_per_unit: 1,
        },
        {
          name: "up-stt",
          provider: "oa-media",
          upstream_model: "whisper-1",
          modality: "transcription",
          price_per_unit: 100,
        },
      ],
      routes: [],
    });

  async function sendMedia(gw: {
    url: string;
  }): Promise<{ status: number; type: string | null; bytes: string }[]> {
    const form = new FormData();
    form.set("model", "up-stt");
    form.set("language", "id");
    form.set(
      "file",
      new Blob([Buffer.from("fake mp3 payload for cassettes")], { type: "audio/mpeg" }),
      "clip.mp3",
    );
    const answers = [
      await post(gw, "/v1/images/generations", {
        model: "up-image",
        prompt: "a red square",
        size: "64x64",
      }),
      await post(gw, "/v1/audio/speech", {
        model: "up-tts",
        input: "say this",
        voice: "nova",
        response_format: "mp3",
      }),
      await fetch(`${gw.url}/v1/audio/transcriptions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}` },
        body: form,
      }),
    ];
    return Promise.all(
      answers.map(async (res) => ({
        status: res.status,
        type: res.headers.get("content-type"),
        bytes: Buffer.from(await res.arrayBuffer()).toString("base64"),
      })),
    );
  }

  it("records images, speech and transcriptions and replays them with the provider gone, billed the same", async () => {
    const dir = join(root, "media");
    const media = await startFakeOpenAIMedia();
    const recorder = await testGateway({
      config: mediaConfig(media.baseUrl),
      cassettes: { dir, mode: "record" },
    });
    let live: Awaited<ReturnType<typeof sendMedia>>;
    let liveBalance: number;
    try {
      live = await sendMedia(recorder);
      liveBalance = (await quota(recorder)).balance_idr;
    } finally {
      await recorder.close();
      await media.close();
    }
    expect(live.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(readdirSync(dir)).toHaveLength(3);
    const speech = readdirSync(dir).find((f) => f.startsWith("oa-media-tts-1-say-this-")) ?? "";
    expect(JSON.parse(readFileSync(join(dir, speech), "utf8")).response.base64).toBe(
      fakeSpeechBytes.toString("base64"),
    );

    const player = await testGateway({
      config: mediaConfig(media.baseUrl),
      cassettes: { dir, mode: "replay" },
    });
    try {
      expect(await sendMedia(player)).toEqual(live);
      expect((await quota(player)).balance_idr).toBe(liveBalance);
    } finally {
      await player.close();
    }
  });
});

describe("cassette options", () => {
  it("refuses to start a replay from a directory that does not exist", async () => {
    await expect(
      startWith(
        { dir: join(root, "no-such-dir"), mode: "replay" },
        { oa: "http://127.0.0.1:9/v1", an: "http://127.0.0.1:9/v1" },
      ),
    ).rejects.toThrow(/no-such-dir does not exist/);
  });

  it("refuses an unknown mode", async () => {
    await expect(
      startWith(
        { dir: root, mode: "rewind" as "replay" },
        { oa: "http://127.0.0.1:9/v1", an: "http://127.0.0.1:9/v1" },
      ),
    ).rejects.toThrow(/invalid cassettes option/);
  });
});

describe("gateway serve flags", () => {
  it("serve --replay answers from the cassettes recorded above", async () => {
    const configFile = join(root, "gateway.json");
    writeFileSync(
      configFile,
      JSON.stringify(config("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")),
    );
    const serve = await serveProcess([
      "--db",
      join(root, "serve.db"),
      "--config",
      configFile,
      "--keepalive-ms",
      "5000",
      "--replay",
      cassetteDir,
    ]);
    try {
      for (const i of [0, 1]) {
        const res = await post(serve, exchanges[i].path, exchanges[i].body);
        expect(await res.text()).toBe(recorded[i].text);
      }
    } finally {
      await serve.stop();
    }
  });

  it("serve --capture-bodies lists the bodies at /api/admin/requests", async () => {
    const configFile = join(root, "mock.json");
    writeFileSync(configFile, JSON.stringify(baseConfig()));
    const serve = await serveProcess([
      "--db",
      join(root, "capture.db"),
      "--config",
      configFile,
      "--capture-bodies",
    ]);
    try {
      const body = { model: "mock-gpt", messages: [{ role: "user", content: "captured" }] };
      expect((await post(serve, "/v1/chat/completions", body)).status).toBe(200);
      const { data } = (await (await admin(serve, "GET", "/requests?limit=1")).json()) as {
        data: { received: unknown; answer: { status: number } }[];
      };
      expect(data[0].received).toEqual(body);
      expect(data[0].answer.status).toBe(200);
    } finally {
      await serve.stop();
    }
  });

  it("refuses --record-missing without --replay, in one line", async () => {
    const result = await runCli(
      ["serve", "--port", "0", "--db", ":memory:", "--record-missing"],
      process.env,
    );
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("--record-missing goes with --replay <dir>");
  });
});
