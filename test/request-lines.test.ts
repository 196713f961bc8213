import { afterEach, describe, expect, it } from "vitest";
import { chat } from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

const serves: ServeProcess[] = [];
afterEach(async () => {
  for (const s of serves.splice(0)) await s.stop("SIGKILL");
});

/** A demo `gateway serve` and everything it prints after its ready line. */
async function serveWithLines(args: string[]) {
  const serve = await serveProcess(["--db", ":memory:", ...args], { NO_COLOR: "" });
  serves.push(serve);
  let out = "";
  serve.child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const key = serve.ready.demo_key!;
  const lines = async (count: number, waitMs = 5000) => {
    const deadline = Date.now() + waitMs;
    while (out.split("\n").filter(Boolean).length < count && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    // Nothing more is coming: a line too many would show here.
    await new Promise((r) => setTimeout(r, 100));
    return out.split("\n").filter(Boolean);
  };
  return { serve, key, lines };
}

/** Five requests; the x-request-id of each answer, in order. */
async function sendRequests(url: string, key: string): Promise<string[]> {
  const ids: string[] = [];
  const idOf = async (res: Response) => {
    ids.push(res.headers.get("x-request-id") ?? "none");
    await res.text();
  };
  const post = (body: unknown, auth = key) =>
    fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${auth}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    }).then(idOf);
  await post(chat("hello"));
  await post(chat("no such", "mock-nope"));
  await post(chat("stream me", "mock-gpt", { stream: true }));
  await post(chat("hello"), "kn-not-a-key-at-all-000000000000000");
  await fetch(`${url}/v1/models?secret=abc`).then(idOf);
  // A browser's own request for an icon is answered, and not worth a line.
  await fetch(`${url}/favicon.ico`).then((r) => r.text());
  return ids;
}

describe("gateway serve prints one line per request", () => {
  it("in text: time, status, method and path, model, ms, cost and key label; no key value", async () => {
    const { serve, key, lines } = await serveWithLines([]);
    const ids = await sendRequests(serve.url, key);
    const got = await lines(5);
    expect(got).toHaveLength(5);
    // Each line ends with its request's id, the one its answer carried.
    got.forEach((line, i) => {
      expect(ids[i]).toMatch(/^req_[\w-]+$/);
      expect(line.endsWith(`  ${ids[i]}`)).toBe(true);
    });
    const id = "req_[\\w-]+";
    const time = "\\d\\d:\\d\\d:\\d\\d";
    const ms = "\\d+(\\.\\d)? ms";
    expect(got[0]).toMatch(
      new RegExp(
        `^${time}  200  POST /v1/chat/completions  mock-gpt  ${ms}  IDR \\d+\\.\\d\\d  key demo  ${id}$`,
      ),
    );
    expect(got[1]).toMatch(
      new RegExp(
        `^${time}  400  POST /v1/chat/completions  mock-nope  ${ms}  key demo  model_not_found  ${id}$`,
      ),
    );
    expect(got[2]).toMatch(
      new RegExp(
        `^${time}  200  POST /v1/chat/completions  mock-gpt  ${ms}  IDR \\d+\\.\\d\\d  key demo  stream  ${id}$`,
      ),
    );
    expect(got[3]).toMatch(
      new RegExp(`^${time}  401  POST /v1/chat/completions  -  ${ms}  key_unknown  ${id}$`),
    );
    expect(got[4]).toMatch(new RegExp(`^${time}  200  GET /v1/models  -  ${ms}  ${id}$`));
    const all = got.join("\n");
    expect(all).not.toContain(key);
    expect(all).not.toContain("kn-");
    expect(all).not.toContain("secret=abc");
    expect(all).not.toContain("\u001b[");
  });

  it("in JSON: one object per line with the same fields, machine-readable", async () => {
    const { serve, key, lines } = await serveWithLines(["--log-format", "json"]);
    const ids = await sendRequests(serve.url, key);
    const got = (await lines(5)).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(got).toHaveLength(5);
    expect(got[0]).toMatchObject({
      method: "POST",
      path: "/v1/chat/completions",
      status: 200,
      model: "mock-gpt",
      key: "demo",
      stream: false,
      error: null,
      aborted: false,
    });
    expect(got[0].cost_idr).toBeGreaterThan(0);
    expect(got[0].input_tokens).toBeGreaterThan(0);
    expect(got[0].output_tokens).toBeGreaterThan(0);
    expect(typeof got[0].ms).toBe("number");
    expect(Date.parse(got[0].time as string)).not.toBeNaN();
    expect(got.map((line) => line.request_id)).toEqual(ids);
    expect(got[1]).toMatchObject({
      status: 400,
      model: "mock-nope",
      cost_idr: null,
      error: "model_not_found",
    });
    expect(got[2]).toMatchObject({ status: 200, stream: true, provider: "mock" });
    expect(got[3]).toMatchObject({ status: 401, key: null, model: null, error: "key_unknown" });
    expect(got[4]).toMatchObject({ method: "GET", path: "/v1/models", status: 200 });
    expect(JSON.stringify(got)).not.toContain("kn-");
  });

  it("marks a stream that broke after its 200 with the error it ended with", async () => {
    const { serve, key, lines } = await serveWithLines([]);
    const res = await fetch(`${serve.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(chat("[[mock:break=2]] go", "mock-gpt", { stream: true })),
    });
    expect(res.status).toBe(200);
    await res.text();
    const [line] = await lines(1);
    expect(line).toMatch(
      / {2}200 {2}POST \/v1\/chat\/completions {2}mock-gpt {2}.* {2}stream {2}upstream_error {2}req_[\w-]+$/,
    );
  });

  it("names the tools a request was sent without, in text and in JSON", async () => {
    for (const format of ["text", "json"]) {
      const { serve, key, lines } = await serveWithLines(["--log-format", format]);
      const res = await fetch(`${serve.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "mock-gpt",
          input: "news?",
          tools: [{ type: "web_search" }],
        }),
      });
      expect(res.headers.get("x-gateway-tools-omitted")).toBe("web_search");
      await res.text();
      const [line] = await lines(1);
      if (format === "text")
        expect(line).toMatch(/ {2}key demo {2}tools omitted: web_search {2}req_[\w-]+$/);
      else expect(JSON.parse(line)).toMatchObject({ tools_omitted: ["web_search"] });
    }
  });

  it("prints none with --quiet", async () => {
    const { serve, key, lines } = await serveWithLines(["--quiet"]);
    await sendRequests(serve.url, key);
    expect(await lines(1, 500)).toEqual([]);
  });
});
