import { createServer } from "node:net";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requestLinePrinter } from "../src/cli/request-lines.js";
import { cliHome, runCli } from "./support/cli.js";
import { baseConfig, chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The snags of a newcomer's first ten minutes (README's tour): each refusal names what to do
 * next. A key sent without its `Bearer`, a provider's key sent in place of the gateway's, a path
 * one letter off the API's, and a provider the gateway cannot reach.
 */

/** A port on 127.0.0.1 nothing listens on: it was taken, then given back. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let gw: TestGateway;
/** serve's text lines, as `gateway serve` prints them. */
const printed: string[] = [];

beforeAll(async () => {
  const base = baseConfig();
  const sink = {
    isTTY: false,
    write: (chunk: string) => printed.push(chunk),
  } as unknown as NodeJS.WriteStream;
  gw = await testGateway({
    config: {
      ...base,
      providers: [
        ...base.providers!,
        {
          id: "openai",
          wire: "openai",
          base_url: `http://127.0.0.1:${await closedPort()}/v1`,
          api_keys: ["sk-never-reached-000000000000"],
        },
      ],
      models: [...base.models!, { name: "gpt-4o", provider: "openai" }],
    },
    onRequest: requestLinePrinter("text", sink),
  });
});
afterAll(() => gw?.close());

/** The printed line of the request whose answer carried `res`'s request id (5 s). */
async function lineOf(res: Response): Promise<string> {
  const id = res.headers.get("x-request-id");
  expect(id).toBeTruthy();
  for (let waited = 0; waited < 5_000; waited += 20) {
    const line = printed.find((l) => l.includes(id!));
    if (line) return line;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`no serve line for ${id}`);
}

describe("a key sent the wrong way", () => {
  it("in Authorization without `Bearer `: the 401 says the header's value was not read as a key, and how to send it", async () => {
    const res = await post(gw, "/v1/chat/completions", chat(), { authorization: KEY });
    expect(res.status).toBe(401);
    expect(await res.text()).toBe(
      "missing API key: the Authorization header has no Bearer scheme, so its value is not read as a key; send Authorization: Bearer kn-... or x-api-key",
    );
    expect(await lineOf(res)).toContain("key_missing");
    // No header at all is still told what to send.
    const none = await post(gw, "/v1/chat/completions", chat(), {});
    expect(await none.text()).toBe(
      "missing API key: send Authorization: Bearer kn-... or x-api-key",
    );
  });

  it("a provider's key (`sk-...`) in place of the gateway's: named as no gateway key, and where a provider's key goes", async () => {
    const openai = new OpenAI({
      apiKey: "sk-proj-left-in-the-environment-0000",
      baseURL: `${gw.url}/v1`,
      maxRetries: 0,
    });
    const err = await openai.chat.completions
      .create({ model: "mock-gpt", messages: [{ role: "user", content: "hi" }] })
      .then(
        () => undefined,
        (e: { status?: number; message: string }) => e,
      );
    expect(err?.status).toBe(401);
    expect(err?.message).toContain(
      "invalid API key: this is not a gateway key (those start with kn-); send the kn-... key the gateway made, as a provider's own key goes in the gateway's config, never in a request",
    );
    expect(err?.message).not.toContain("left-in-the-environment");
    // A gateway key with a typo is still told to check it.
    const typo = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${KEY.slice(0, -1)}x`,
    });
    expect(await typo.text()).toMatch(/^invalid API key: no gateway key has this value; check/);
  });
});

describe("a path one letter off the model API's", () => {
  it.each([
    ["GET", "/v1/model", "/v1/models"],
    ["POST", "/v1/chat/completion", "/v1/chat/completions"],
    ["POST", "/v1/message", "/v1/messages"],
    ["POST", "/v1/embedding", "/v1/embeddings"],
    ["POST", "/v1/response", "/v1/responses"],
  ])("%s %s: the 404 names %s, the nearest path the gateway serves", async (method, path, near) => {
    const res = await fetch(`${gw.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: method === "POST" ? JSON.stringify(chat()) : undefined,
    });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      error: {
        message: `No route ${method} ${path}; send it to ${method} ${near} (the nearest path the gateway serves).`,
        type: "not_found",
        param: null,
        code: "not_found",
      },
    });
  });

  it("a path near none names none, and a method its path does not take is told the methods it does", async () => {
    const far = await post(gw, "/v1/something-else-entirely", {});
    expect(((await far.json()) as { error: { message: string } }).error.message).toBe(
      "No route POST /v1/something-else-entirely.",
    );
    const method = await post(gw, "/v1/models", {});
    expect(((await method.json()) as { error: { message: string } }).error.message).toMatch(
      /^No route POST \/v1\/models; this path takes GET/,
    );
  });
});

describe("a provider the gateway cannot reach", () => {
  it("the client gets the spec's 503; serve's line names the provider, why, and what to check", async () => {
    const res = await post(gw, "/v1/chat/completions", chat("hi", "gpt-4o"));
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("upstream_error");
    expect(body.error.message).not.toContain("127.0.0.1");
    const line = await lineOf(res);
    expect(line).toContain(
      "steps: gpt-4o unreachable: provider openai (connection refused; check its base_url and this machine's network)",
    );
    expect(line).toContain("upstream_error");
    // A provider that answered with a failure has no such step: sending again may help there.
    const down = await post(gw, "/v1/chat/completions", chat("hi", "mock-down"));
    expect(down.status).toBe(503);
    expect(await lineOf(down)).not.toContain("unreachable");
  });
});

describe("gateway --help", () => {
  it("says where to start, as this user runs the CLI, and where each command's options are", async () => {
    const home = cliHome();
    try {
      const help = await runCli(["--help"], home.env);
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(
        /\nStart here:\n {2}\$ (npx )?gateway serve {4}a demo setup in \.\/gateway\.db, answered offline by a mock provider; it prints a key\n/,
      );
      expect(help.stdout).toContain("all of them in docs/cli.md");
    } finally {
      home.remove();
    }
  });
});
