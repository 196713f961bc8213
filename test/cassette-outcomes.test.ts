import { once } from "node:events";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import OpenAI from "openai";
import { beforeAll, describe, expect, it } from "vitest";
import { ConfigError, type RunningGateway } from "../src/index.js";
import { useCassetteSuite } from "./support/cassette-suite.js";
import { runCli, spawnCli } from "./support/cli.js";
import { deferred, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";

/**
 * What a suite recording cassettes meets besides answers: a provider that fails without one
 * (refused, cut, too slow), a replay that misses and has to say how to record, and two gateways
 * recording into one folder.
 */

const KEY = "kn-cassette-outcomes-key-000000000000";
const PROVIDER_KEY = "sk-provider-outcomes-secret-5151";

let root: string;
let upstream: FakeUpstream;
/** An address where nothing listens: a connection to it is refused. */
let nobody: string;
const {
  config,
  start: gateway,
  closeStarted,
  client,
} = useCassetteSuite({ key: KEY, providerKey: PROVIDER_KEY, timeoutMs: 500 }, (started) => {
  ({ root, upstream } = started);
});

beforeAll(async () => {
  const probe = createServer().listen(0, "127.0.0.1");
  await once(probe, "listening");
  nobody = `http://127.0.0.1:${(probe.address() as { port: number }).port}/v1`;
  await new Promise((resolve) => probe.close(resolve));
});

const question = {
  model: "app-chat",
  messages: [{ role: "user" as const, content: "Still there?" }],
};

/** What the client of the app sees: the answer's text, or the error's status, type and code. */
async function outcome(gw: RunningGateway, stream = false): Promise<unknown> {
  try {
    if (!stream) {
      const answer = await client(gw).chat.completions.create(question);
      return answer.choices[0].message.content;
    }
    let text = "";
    for await (const part of await client(gw).chat.completions.create({ ...question, stream }))
      text += part.choices[0]?.delta?.content ?? "";
    return text;
  } catch (err) {
    if (!(err instanceof OpenAI.APIError)) throw err;
    const { type, code } = (err.error ?? {}) as { type?: string; code?: string };
    return { status: err.status, type, code };
  }
}

function cassettesIn(dir: string): { name: string; text: string }[] {
  return readdirSync(dir).map((name) => ({ name, text: readFileSync(join(dir, name), "utf8") }));
}

describe("a provider that fails without an answer, recorded", () => {
  const cases = [
    { name: "a refused connection", stream: false, baseUrl: () => nobody, timeout: false },
    { name: "a refused connection (stream)", stream: true, baseUrl: () => nobody, timeout: false },
    {
      name: "an answer cut halfway",
      stream: false,
      baseUrl: () => {
        upstream.handle(() => ({ ...openaiJson("never whole"), cutHalfway: true }));
        return upstream.baseUrl;
      },
      timeout: false,
    },
    {
      name: "an answer later than the provider's timeout_ms",
      stream: false,
      baseUrl: () => {
        upstream.handle(() => ({ kind: "hang" }));
        return upstream.baseUrl;
      },
      timeout: true,
    },
  ];

  it.each(cases)(
    "$name: the replay answers what the recording run got, not a missing cassette",
    async ({ name, stream, baseUrl, timeout }) => {
      const dir = join(root, name.replaceAll(/\W+/g, "-"));
      const recording = await gateway({ dir, mode: "record" }, baseUrl());
      const recorded = await outcome(recording, stream);
      expect(recorded).toMatchObject({ status: 503, code: "upstream_error" });

      // Nothing listens at the provider's address while replaying.
      const replaying = await gateway({ dir, mode: "replay" }, nobody);
      expect(await outcome(replaying, stream)).toEqual(recorded);
      const [row] = await replaying.listRequests({ limit: 1 });
      expect([row.status, row.error_code, row.cost_micro]).toEqual([503, "upstream_error", 0]);

      // One file, which says what happened and holds no key.
      const files = cassettesIn(dir);
      expect(files).toHaveLength(1);
      const cassette = JSON.parse(files[0].text) as { response: Record<string, unknown> };
      expect(cassette.response.status).toBeUndefined();
      expect(cassette.response.failure).toMatchObject(timeout ? { timeout: true } : {});
      expect(files[0].text).not.toContain(PROVIDER_KEY);
    },
  );

  it("a request the client left while it waited is not recorded: its outcome was never heard", async () => {
    const dir = join(root, "client-left");
    const reached = deferred();
    upstream.handle(() => {
      reached.resolve();
      return { kind: "hang" };
    });
    const gw = await gateway({ dir, mode: "record" });
    const leaving = new AbortController();
    const asked = client(gw).chat.completions.create(question, { signal: leaving.signal });
    await reached.promise;
    leaving.abort();
    await expect(asked).rejects.toThrow();
    await gw.close();
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe("a replay that misses says how to record it, in the words the user started it with", () => {
  it("startGateway: the cassettes option's mode", async () => {
    const dir = join(root, "miss-option");
    mkdirSync(dir);
    const gw = await gateway({ dir, mode: "replay" }, nobody);
    const missed = await client(gw)
      .chat.completions.create(question)
      .catch((err: unknown) => err);
    expect(missed).toBeInstanceOf(OpenAI.BadRequestError);
    const message = (missed as Error).message;
    expect(message).toContain(`No cassette in ${dir}`);
    expect(message).toContain('cassettes: { mode: "record-missing" }');
    expect(message).not.toContain("--record");
  });

  it("gateway serve: its flags", async () => {
    const dir = join(root, "miss-flags");
    mkdirSync(dir);
    const configFile = join(root, "miss-flags.json");
    writeFileSync(configFile, JSON.stringify(config(nobody)));
    const replaying = spawnCli(
      [
        "serve",
        "--port",
        "0",
        "--json",
        "--db",
        ":memory:",
        "--config",
        configFile,
        "--replay",
        dir,
      ],
      process.env,
    );
    const [ready] = await replaying.waitFor(/^\{.*\}$/m, 25_000);
    const { url } = JSON.parse(ready) as { url: string };
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
    const missed = await openai.chat.completions.create(question).catch((err: unknown) => err);
    expect(missed).toBeInstanceOf(OpenAI.BadRequestError);
    const message = (missed as Error).message;
    expect(message).toContain("Record it with --record-missing");
    expect(message).not.toContain("mode:");
  });
});

describe("two gateways recording into one folder", () => {
  it("a second recording (mode record) is refused while one records: it would remove the files the other writes", async () => {
    const dir = join(root, "two-recorders");
    await gateway({ dir, mode: "record" });
    const refused = await gateway({ dir, mode: "record" }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ConfigError);
    const message = (refused as Error).message;
    expect(message).toContain(`dir: ${dir} is being recorded into by another gateway`);
    expect(message).toContain('mode "record-missing"');
    // Nor may one that only adds files start beside it.
    const beside = await gateway({ dir, mode: "record-missing" }).catch((err: unknown) => err);
    expect(beside).toBeInstanceOf(ConfigError);
    expect((beside as Error).message).toContain(`dir: ${dir} is being recorded by another gateway`);

    // Once the first has stopped, the folder records again.
    await closeStarted();
    expect(await outcome(await gateway({ dir, mode: "record" }))).toBe("ok");
  });

  it("gateways that only add files (record-missing) share the folder, and refuse a recording that replaces them", async () => {
    const dir = join(root, "adders");
    const first = await gateway({ dir, mode: "record-missing" });
    const second = await gateway({ dir, mode: "record-missing" });
    expect(await outcome(first)).toBe("ok");
    expect(await outcome(second)).toBe("ok");
    const refused = await gateway({ dir, mode: "record" }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toContain("is being recorded into by another gateway");
  });

  it("gateway serve --record on a folder another gateway records into: one line naming its flags, exit 1", async () => {
    const dir = join(root, "serve-second");
    await gateway({ dir, mode: "record" });
    const configFile = join(root, "serve-second.json");
    writeFileSync(configFile, JSON.stringify(config(upstream.baseUrl)));
    const { code, stderr } = await runCli(
      ["serve", "--port", "0", "--db", ":memory:", "--config", configFile, "--record", dir],
      process.env,
    );
    expect(code).toBe(1);
    expect(stderr).toContain(`dir: ${dir} is being recorded into by another gateway`);
    expect(stderr).toContain("--replay with --record-missing");
    expect(stderr).not.toMatch(/\n\s+at /);
  });
});
