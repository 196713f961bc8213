import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ADMIN_KEY,
  chat,
  KEY,
  KEY2,
  LOGIN_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/**
 * Issue 29, point 6: a request carrying two different keys is refused with the spec's plain-text
 * 401 instead of being served as one of them. Raw HTTP, since fetch joins a repeated header.
 */

let gw: TestGateway;
beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw?.close();
});

/** Sends one request as written (headers in order, repeats kept) and reads the whole answer. */
function rawRequest(
  method: string,
  path: string,
  headers: [string, string][],
  body = "",
): Promise<{ status: number; contentType: string; body: string }> {
  const port = Number(new URL(gw.url).port);
  const lines = [
    `${method} ${path} HTTP/1.1`,
    "Host: 127.0.0.1",
    "Connection: close",
    ...headers.map(([name, value]) => `${name}: ${value}`),
    ...(body
      ? ["Content-Type: application/json", `Content-Length: ${Buffer.byteLength(body)}`]
      : []),
  ];
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port }, () => {
      socket.write(`${lines.join("\r\n")}\r\n\r\n${body}`);
    });
    const parts: Buffer[] = [];
    socket.on("data", (d: Buffer) => parts.push(d));
    socket.setTimeout(10_000, () => socket.destroy(new Error("no answer in 10 s")));
    socket.once("error", reject);
    socket.once("close", () => {
      const raw = Buffer.concat(parts).toString("utf8");
      const head = raw.slice(0, raw.indexOf("\r\n\r\n"));
      const rest = raw.slice(raw.indexOf("\r\n\r\n") + 4);
      const chunked = /^transfer-encoding: chunked/im.test(head);
      resolve({
        status: Number(head.split(" ")[1]),
        contentType: /^content-type: (.*)$/im.exec(head)?.[1] ?? "",
        body: chunked ? dechunk(rest) : rest,
      });
    });
  });
}

function dechunk(text: string): string {
  let out = "";
  let at = 0;
  for (;;) {
    const end = text.indexOf("\r\n", at);
    const size = Number.parseInt(text.slice(at, end), 16);
    if (!size) return out;
    out += text.slice(end + 2, end + 2 + size);
    at = end + 2 + size + 2;
  }
}

const conflict = "conflicting API keys: send one key, as Authorization: Bearer kn-... or x-api-key";
const chatBody = JSON.stringify(chat("who pays?"));

describe("two different keys on one request", () => {
  it.each([
    [
      "two Authorization headers",
      [
        ["Authorization", `Bearer ${KEY}`],
        ["Authorization", `Bearer ${KEY2}`],
      ],
    ],
    [
      "two Authorization headers, the second a wrong key",
      [
        ["Authorization", `Bearer ${KEY}`],
        ["authorization", "Bearer kn-not-a-key"],
      ],
    ],
    [
      "a Bearer key and a different x-api-key",
      [
        ["Authorization", `Bearer ${KEY}`],
        ["x-api-key", KEY2],
      ],
    ],
    [
      "an x-api-key and a different Bearer key",
      [
        ["x-api-key", KEY2],
        ["Authorization", `Bearer ${KEY}`],
      ],
    ],
    [
      "two different x-api-key headers",
      [
        ["x-api-key", KEY],
        ["X-Api-Key", KEY2],
      ],
    ],
  ] as [string, [string, string][]][])("%s: plain-text 401 on /v1", async (_, headers) => {
    const res = await rawRequest("POST", "/v1/chat/completions", headers, chatBody);
    expect(res.status).toBe(401);
    expect(res.contentType).toMatch(/^text\/plain/);
    expect(res.body).toBe(conflict);
  });

  it("is refused on every keyed surface: a GET on /v1, the tools' API, the admin API", async () => {
    for (const [path, first, second] of [
      ["/v1/account/quota", KEY, KEY2],
      ["/api/auth/whoami", LOGIN_KEY, KEY],
      ["/api/keys", LOGIN_KEY, KEY],
      ["/api/admin/accounts", ADMIN_KEY, KEY],
    ]) {
      const res = await rawRequest("GET", path, [
        ["Authorization", `Bearer ${first}`],
        ["Authorization", `Bearer ${second}`],
      ]);
      expect({ path, status: res.status, body: res.body }).toEqual({
        path,
        status: 401,
        body: conflict,
      });
      const mixed = await rawRequest("GET", path, [
        ["Authorization", `Bearer ${first}`],
        ["x-api-key", second],
      ]);
      expect({ path, status: mixed.status }).toEqual({ path, status: 401 });
    }
  });
});

describe("the same key twice, or one key", () => {
  it.each([
    ["one Bearer key", [["Authorization", `Bearer ${KEY}`]]],
    [
      "the same Authorization header twice",
      [
        ["Authorization", `Bearer ${KEY}`],
        ["Authorization", `Bearer ${KEY}`],
      ],
    ],
    [
      "a Bearer key and the same x-api-key",
      [
        ["Authorization", `Bearer ${KEY}`],
        ["x-api-key", KEY],
      ],
    ],
    [
      "the same x-api-key twice",
      [
        ["x-api-key", KEY],
        ["x-api-key", KEY],
      ],
    ],
    [
      "a Basic authorization beside an x-api-key",
      [
        ["Authorization", "Basic dXNlcjpwYXNz"],
        ["x-api-key", KEY],
      ],
    ],
  ] as [string, [string, string][]][])("%s: served", async (_, headers) => {
    const res = await rawRequest("POST", "/v1/chat/completions", headers, chatBody);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toMatchObject({ object: "chat.completion" });
  });
});
