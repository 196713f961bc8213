import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { constants, crc32, deflateRawSync } from "node:zlib";
import OpenAI, { toFile } from "openai";
import pg from "pg";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startGateway } from "../src/server/gateway.js";
import { decodeRgbaPng } from "../src/server/media/png.js";
import { mockImage } from "../src/server/providers/mock/media/index.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { errorOf, idleMoney, money } from "./support/api.js";
import { type CliHome, cliHome, killRunningClis, runCli, spawnCli } from "./support/cli.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { logged } from "./support/metering.js";
import { createTestDatabase } from "./support/postgres.js";
import { streamData } from "./support/sse.js";

/**
 * Slips a client of `gateway serve` and of the test kit ran into: a refused start that left files
 * behind, `n` answers whose scripted usage and tool-call ids did not add up, and an image edit
 * that inflated whatever PNG it was sent.
 */

describe("a refused gateway serve leaves nothing behind it", () => {
  let home: CliHome;
  let cwd: string;
  beforeEach(() => {
    home = cliHome();
    cwd = join(home.dir, "work");
    mkdirSync(cwd);
  });
  afterEach(() => {
    killRunningClis();
    home.remove();
  });

  const serve = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    runCli(["serve", ...args], { ...home.env, ...env }, 15_000, cwd);
  const files = () => readdirSync(cwd).sort();

  /** A port something else holds for the length of `use`. */
  async function withPortTaken<T>(use: (port: number) => Promise<T>): Promise<T> {
    const blocker = createServer().listen(0, "127.0.0.1");
    await once(blocker, "listening");
    try {
      return await use((blocker.address() as { port: number }).port);
    } finally {
      blocker.close();
    }
  }

  it("--db on a file that is not a database: its mode and content as they were, no lock beside it", async () => {
    const notes = join(cwd, "notes.txt");
    const text = "these are my notes, not a database\n".repeat(20);
    writeFileSync(notes, text);
    chmodSync(notes, 0o644);
    const line = `gateway: --db ${notes} is not a gateway database (not an SQLite file); give another file, or a new name to create one`;
    for (const command of [
      ["serve", "--port", "0", "--db", notes],
      ["keys", "create", "--db", notes],
      ["owner-link", "--db", notes],
    ]) {
      const refused = await runCli(command, home.env, 15_000, cwd);
      expect(refused.code, command.join(" ")).toBe(2);
      expect(refused.stderr.trim()).toBe(line);
      expect(statSync(notes).mode & 0o777, command.join(" ")).toBe(0o644);
      expect(readFileSync(notes, "utf8")).toBe(text);
      expect(files(), command.join(" ")).toEqual(["notes.txt"]);
    }
  });

  it("--db on a directory: no lock beside it", async () => {
    mkdirSync(join(cwd, "data"));
    const refused = await serve(["--port", "0", "--db", "data"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("--db data is a directory");
    expect(files()).toEqual(["data"]);
  });

  it("--host it cannot listen on: no ./gateway.db, no key, no lock", async () => {
    const refused = await serve(["--port", "0", "--host", "999.1.1.1"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("cannot listen on --host 999.1.1.1");
    expect(files()).toEqual([]);
  });

  it("a port in use: no ./gateway.db, no key, no lock", async () => {
    await withPortTaken(async (port) => {
      const refused = await serve(["--port", String(port)]);
      expect(refused.code).toBe(1);
      expect(refused.stderr.trim()).toBe(`gateway: port ${port} is already in use; try --port 0`);
    });
    expect(files()).toEqual([]);
  });

  it("a --port out of range: nothing made", async () => {
    const refused = await serve(["--port", "99999"]);
    expect(refused.code).toBe(2);
    expect(files()).toEqual([]);
  });

  it("an invalid config, or one that is missing: nothing made beside it", async () => {
    writeFileSync(
      join(cwd, "bad.json"),
      JSON.stringify({ providers: [{ id: "x", wire: "nope" }] }),
    );
    const invalid = await serve(["--port", "0", "--db", "new.db", "--config", "bad.json"]);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toMatch(/providers\[0\]\.wire/);
    const missing = await serve(["--port", "0", "--db", "new.db", "--config", "nowhere.json"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("cannot read nowhere.json");
    expect(files()).toEqual(["bad.json"]);
  });

  it("a secret key or key store it cannot use, found once the database is open: what it made is gone", async () => {
    const badKey = await serve(["--port", "0", "--db", "new.db"], { GATEWAY_SECRET_KEY: "zz" });
    expect(badKey.code).toBe(1);
    expect(badKey.stderr).toContain("GATEWAY_SECRET_KEY must be 32 bytes");
    const badStore = await serve(["--port", "0", "--db", "new.db"], {
      GATEWAY_SECRET_KEY: "",
      GATEWAY_SECRET_KEY_STORE: "bogus",
    });
    expect(badStore.code).toBe(1);
    expect(badStore.stderr).toContain(
      'GATEWAY_SECRET_KEY_STORE must be "auto", "file" or "keychain"',
    );
    expect(files()).toEqual([]);
  });

  it("refused on a database that was there: its files stay, and nothing is added", async () => {
    // Made by a start that served and stopped: what a user has on disk.
    const first = spawnCli(["serve", "--port", "0", "--json", "--db", "kept.db"], home.env, cwd);
    await first.waitFor(/"url"/);
    first.child.kill("SIGTERM");
    expect((await first.exit()).code).toBe(0);
    const before = new Map(files().map((name) => [name, readFileSync(join(cwd, name))]));
    expect([...before.keys()]).toContain("kept.db");

    await withPortTaken(async (port) => {
      expect((await serve(["--port", String(port), "--db", "kept.db"])).code).toBe(1);
    });
    for (const [name, bytes] of before)
      expect(readFileSync(join(cwd, name)).equals(bytes), name).toBe(true);
    const wrongKey = await serve(["--port", "0", "--db", "kept.db"], {
      GATEWAY_SECRET_KEY: Buffer.alloc(32, 7).toString("base64"),
    });
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toContain("does not open the BYOK keys");
    expect(files()).toEqual([...before.keys()]);
  });

  it("--record, refused once the database is open (a config key held under another id): no cassette folder", async () => {
    const config = baseConfig();
    writeFileSync(join(cwd, "first.json"), JSON.stringify(config));
    config.accounts![0].keys![0].id = "moved";
    writeFileSync(join(cwd, "second.json"), JSON.stringify(config));
    const first = spawnCli(
      ["serve", "--port", "0", "--json", "--db", "kept.db", "--config", "first.json"],
      home.env,
      cwd,
    );
    await first.waitFor(/"url"/);
    first.child.kill("SIGTERM");
    expect((await first.exit()).code).toBe(0);
    mkdirSync(join(cwd, "mine"));
    const before = files();
    for (const dir of ["cassettes/openai", "mine/cassettes", "mine"]) {
      const refused = await serve([
        "--port",
        "0",
        "--db",
        "kept.db",
        "--config",
        "second.json",
        "--record",
        dir,
      ]);
      expect(refused.code, dir).toBe(1);
      expect(refused.stderr, dir).toContain("the database already has this key");
      expect(files(), dir).toEqual(before);
      expect(readdirSync(join(cwd, "mine")), dir).toEqual([]);
    }
  });

  it("the port of the gateway already serving the same database names that gateway, as before", async () => {
    const first = spawnCli(["serve", "--port", "0", "--json", "--db", "one.db"], home.env, cwd);
    const [, port] = await first.waitFor(/"port":(\d+)/);
    const second = await serve(["--port", port, "--db", "one.db"]);
    expect(second.code).toBe(1);
    expect(second.stderr.trim()).toBe(
      `gateway: another gateway (pid ${first.child.pid}, http://127.0.0.1:${port}) is serving one.db; stop it first, or use another database (--db other.db)`,
    );
    first.child.kill("SIGTERM");
    expect((await first.exit()).code).toBe(0);
  });

  it("startGateway on Postgres at an address it cannot listen on writes nothing to the database", async () => {
    const url = await createTestDatabase();
    // What every gateway on a shared database is given, so nothing else refuses the start.
    const saved = process.env[secretKeyEnv];
    process.env[secretKeyEnv] = randomBytes(32).toString("base64");
    try {
      await expect(startGateway({ db: url, host: "999.1.1.1", port: 0 })).rejects.toMatchObject({
        code: expect.stringMatching(/^(ENOTFOUND|EAI_AGAIN|EADDRNOTAVAIL)$/),
      });
    } finally {
      if (saved === undefined) delete process.env[secretKeyEnv];
      else process.env[secretKeyEnv] = saved;
    }
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const tables = await client.query(
        "SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'",
      );
      expect(tables.rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
  });

  it("startGateway on a port in use rejects and leaves no database file", async () => {
    await withPortTaken(async (port) => {
      await expect(startGateway({ db: join(cwd, "api.db"), port })).rejects.toMatchObject({
        code: "EADDRINUSE",
      });
    });
    expect(files()).toEqual([]);
  });
});

describe("the test kit's scripted answers with n", () => {
  let gw: TestGateway;
  let openai: OpenAI;
  beforeAll(async () => {
    gw = await testGateway();
    openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  });
  afterAll(() => gw.close());
  afterEach(() => gw.mock.reset());

  /** baseConfig's mock-gpt: micro-IDR per token. */
  const PRICE_IN = 10_000;
  const PRICE_OUT = 20_000;
  const tools: OpenAI.ChatCompletionTool[] = [
    {
      type: "function",
      function: {
        name: "get_weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];
  const usage = { input_tokens: 7, output_tokens: 41 };
  const ask = (content: string) => ({
    model: "mock-gpt",
    n: 2,
    max_tokens: 100,
    tools,
    messages: [{ role: "user" as const, content }],
  });

  /** The request's charge is what its usage says, and the balance fell by that. */
  async function expectCharged(
    before: { balance: number },
    expected: { input_tokens: number; output_tokens: number },
  ) {
    const after = await idleMoney(gw);
    const [row] = await logged(gw);
    expect(row.usage).toEqual(expected);
    expect(row.cost_micro).toBe(
      expected.input_tokens * PRICE_IN + expected.output_tokens * PRICE_OUT,
    );
    expect(before.balance - after.balance).toBe(row.cost_micro);
  }

  it("a whole answer: the scripted usage as the client's, the prompt once, and every tool call its own id", async () => {
    gw.mock.reply(
      { user_text: "whole weather" },
      { tool_calls: [{ name: "get_weather", arguments: { city: "Oslo" } }], usage },
    );
    const before = await money(gw);
    const answer = await openai.chat.completions.create(ask("whole weather"));
    expect(answer.choices).toHaveLength(2);
    expect(answer.usage).toMatchObject({
      prompt_tokens: 7,
      completion_tokens: 41,
      total_tokens: 48,
    });
    const ids = answer.choices.flatMap((c) => c.message.tool_calls?.map((t) => t.id) ?? []);
    expect(ids).toHaveLength(2);
    expect(new Set(ids).size).toBe(2);
    for (const choice of answer.choices) {
      const [call] = choice.message.tool_calls ?? [];
      expect(call?.type === "function" && JSON.parse(call.function.arguments)).toEqual({
        city: "Oslo",
      });
    }
    await expectCharged(before, usage);
  });

  it("a stream: the same usage in its last chunk, and every tool call its own id", async () => {
    gw.mock.reply(
      { user_text: "streamed weather" },
      { tool_calls: [{ name: "get_weather", arguments: { city: "Oslo" } }], usage },
    );
    const before = await money(gw);
    const res = await post(gw, "/v1/chat/completions", {
      ...ask("streamed weather"),
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    type Chunk = {
      choices: { index: number; delta: { tool_calls?: { id?: string }[] } }[];
      usage?: { prompt_tokens: number; completion_tokens: number } | null;
    };
    const chunks = await streamData<Chunk>(res);
    const ids = chunks.flatMap((c) =>
      c.choices.flatMap((choice) => (choice.delta.tool_calls ?? []).flatMap((t) => t.id ?? [])),
    );
    expect(ids).toHaveLength(2);
    expect(new Set(ids).size).toBe(2);
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 41 });
    await expectCharged(before, usage);
  });

  it("text answers: the scripted usage is the whole response's, however many answers", async () => {
    gw.mock.reply({ user_text: "three texts" }, { text: "It is sunny.", usage });
    const before = await money(gw);
    const answer = await openai.chat.completions.create({ ...ask("three texts"), n: 3 });
    expect(answer.choices.map((c) => c.message.content)).toEqual(Array(3).fill("It is sunny."));
    expect(answer.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 41 });
    await expectCharged(before, usage);
  });

  it("the default mock's [[mock:tool]] gives each answer's call its own id", async () => {
    const answer = await openai.chat.completions.create(ask("[[mock:tool]] weather"));
    const ids = answer.choices.flatMap((c) => c.message.tool_calls?.map((t) => t.id) ?? []);
    expect(ids).toHaveLength(2);
    expect(new Set(ids).size).toBe(2);
  });
});

/**
 * A PNG whose header says `width`x`height` (8-bit RGBA) and whose pixels are all zero: deflate
 * stands for a megabyte of zeros in about a kilobyte, so the file is a thousandth of its pixels.
 */
function zeroPng(width: number, height: number): Buffer {
  const raw = (width * 4 + 1) * height;
  const mib = 1024 * 1024;
  // Sync-flushed pieces end on a byte: laid end to end they are one stream of zeros.
  const flushed = (bytes: number) =>
    deflateRawSync(Buffer.alloc(bytes), { finishFlush: constants.Z_SYNC_FLUSH });
  const piece = flushed(mib);
  const adler = Buffer.alloc(4);
  adler.writeUInt32BE((((raw % 65521) << 16) | 1) >>> 0);
  const zlib = Buffer.concat([
    Buffer.from([0x78, 0x01]),
    ...Array.from({ length: Math.floor(raw / mib) }, () => piece),
    flushed(raw % mib),
    deflateRawSync(Buffer.alloc(0)),
    adler,
  ]);
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8;
  header[9] = 6;
  const chunk = (type: string, data: Buffer) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, "latin1");
    data.copy(out, 8);
    out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
    return out;
  };
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", zlib),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

describe("the mock's image edits and a PNG of more pixels than it draws", () => {
  let gw: TestGateway;
  let openai: OpenAI;
  const bomb = zeroPng(10_000, 10_000);
  beforeAll(async () => {
    gw = await testGateway();
    openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  });
  afterAll(() => gw.close());

  const message =
    "Invalid request: image: the PNG is 10000x10000 pixels; the mock provider reads pictures with sides up to 4096 pixels.";

  it("refuses the image with a 400 in the client's style, charging nothing, with or without a size", async () => {
    // A real PNG: the same file at a size the mock reads decodes to its zeros.
    expect(decodeRgbaPng(zeroPng(64, 64))?.rgba.every((byte) => byte === 0)).toBe(true);
    expect(bomb.length).toBeLessThan(1024 * 1024);
    const before = await money(gw);
    for (const size of [undefined, "256x256"] as const) {
      const form = new FormData();
      form.set("model", "mock-image");
      form.set("prompt", "add a red balloon");
      if (size) form.set("size", size);
      form.set("image", new Blob([bomb], { type: "image/png" }), "bomb.png");
      const res = await fetch(`${gw.url}/v1/images/edits`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}` },
        body: form,
      });
      expect(await errorOf(res), size).toMatchObject({
        status: 400,
        code: "bad_request",
        type: "bad_request",
        message,
      });
    }
    expect((await money(gw)).balance).toBe(before.balance);
  });

  it("refuses the mask too, through the SDK, while a small picture still edits", async () => {
    const picture = mockImage("a small picture", "64x64");
    await expect(
      openai.images.edit({
        model: "mock-image",
        image: await toFile(picture, "in.png", { type: "image/png" }),
        mask: await toFile(bomb, "mask.png", { type: "image/png" }),
        prompt: "sky",
        size: "64x64",
      }),
    ).rejects.toMatchObject({
      status: 400,
      error: { message: message.replace("image:", "mask:") },
    });
    const edited = await openai.images.edit({
      model: "mock-image",
      image: await toFile(picture, "in.png", { type: "image/png" }),
      prompt: "sky",
    });
    expect(edited.data).toHaveLength(1);
  });
});
