// Fuzz: hostile requests over every route against a gateway on :memory: at 127.0.0.1, from a
// fixed seed, so a failure is replayed by running it again. Bad JSON, deep nesting, huge and
// negative numbers, wrong types, odd headers, bad methods, unicode, multipart garbage, raw
// malformed HTTP. It prints the status counts and fails on any 5xx other than 503 (the intended
// provider-failure answer), on any request left without an answer, and on any internal error the
// gateway logged.
//
//   npm run fuzz                        build, then 10,000 requests from seed 1
//   node scripts/fuzz.mjs --count=500 --seed=7 --concurrency=8
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";
import { startGateway } from "../dist/index.js";
import { demoConfig } from "../dist/server/config/demo.js";

const KEY = "kn-fuzz-standard-key-000000000000";
const SHARED = "kn-fuzz-shared-key-00000000000000";
const LOGIN = "kn-fuzz-login-key-000000000000000";
const ADMIN = "kn-fuzz-admin-key-000000000000000";
const POOR = "kn-fuzz-poor-account-key-00000000";
const VICTIM = "kn-fuzz-victim-account-key-000000";

/** Every route the gateway serves, with a valid body where it takes one (mutated below). */
const routes = [
  [
    "POST",
    "/v1/chat/completions",
    () => ({ model: "mock-gpt", messages: [{ role: "user", content: "hi" }] }),
  ],
  [
    "POST",
    "/v1/messages",
    () => ({ model: "mock-claude", max_tokens: 20, messages: [{ role: "user", content: "hi" }] }),
  ],
  ["POST", "/v1/responses", () => ({ model: "mock-gpt", input: "hi" })],
  [
    "POST",
    "/v1/images/generations",
    () => ({ model: "mock-image", prompt: "a cat", n: 1, size: "64x64" }),
  ],
  ["POST", "/v1/audio/speech", () => ({ model: "mock-tts", input: "hello", voice: "alloy" })],
  ["POST", "/v1/audio/transcriptions", "multipart"],
  [
    "POST",
    "/v1/music/generations",
    () => ({ model: "mock-music", prompt: "a tune", duration_seconds: 1 }),
  ],
  [
    "POST",
    "/v1/videos/generations",
    () => ({ model: "mock-video", prompt: "a scene", duration_seconds: 1 }),
  ],
  [
    "POST",
    "/v1/videos/extensions",
    () => ({ model: "mock-video", video_id: "job_x", prompt: "more" }),
  ],
  ["GET", "/v1/models"],
  ["GET", "/v1/account/quota"],
  ["GET", "/v1/usage/summary"],
  ["GET", "/v1/usage/daily"],
  ["GET", "/v1/usage/requests"],
  ["GET", "/v1/files/{id}"],
  ["GET", "/v1/files/{id}/content"],
  ["GET", "/v1/music/generations/{id}"],
  ["GET", "/v1/videos/generations/{id}/content"],
  [
    "POST",
    "/mcp",
    () => ({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: {
        name: "generate_image",
        arguments: { model: "mock-image", prompt: "a cat", size: "64x64" },
      },
    }),
  ],
  ["GET", "/mcp"],
  ["GET", "/api/public/pricing"],
  ["POST", "/api/auth/device/code", () => ({ client_name: "fuzz" })],
  ["POST", "/api/auth/device/token", () => ({ device_code: "abc" })],
  ["GET", "/api/auth/whoami"],
  ["POST", "/api/auth/logout", () => ({})],
  ["GET", "/api/keys"],
  ["POST", "/api/keys", () => ({ label: "tool", shared: false })],
  ["DELETE", "/api/keys/{id}"],
  ["GET", "/api/admin/accounts"],
  ["POST", "/api/admin/accounts", () => ({ id: "new", balance_idr: 10 })],
  ["GET", "/api/admin/accounts/{id}"],
  ["PATCH", "/api/admin/accounts/{id}", () => ({ tier: "free", rpm_limit: 10 })],
  ["POST", "/api/admin/accounts/{id}/topup", () => ({ amount_idr: 100 })],
  ["POST", "/api/admin/accounts/{id}/keys", () => ({ label: "k" })],
  ["POST", "/api/admin/accounts/{id}/suspend", () => ({})],
  ["POST", "/api/admin/accounts/{id}/reinstate", () => ({})],
  ["GET", "/api/admin/accounts/{id}/byok"],
  ["POST", "/api/admin/accounts/{id}/byok", () => ({ provider: "mock", api_key: "sk-x" })],
  ["DELETE", "/api/admin/accounts/{id}/byok/{id}"],
  ["DELETE", "/api/admin/keys/{id}"],
  ["GET", "/api/dashboard/account"],
  ["GET", "/api/dashboard/keys"],
  ["POST", "/api/dashboard/keys", () => ({ label: "d" })],
  ["DELETE", "/api/dashboard/keys/{id}"],
  ["GET", "/api/dashboard/byok"],
  ["POST", "/api/dashboard/byok", () => ({ provider: "mock", api_key: "sk-y" })],
  ["DELETE", "/api/dashboard/byok/{id}"],
  ["PUT", "/api/dashboard/payg", () => ({ enabled: true, limit_idr: 100 })],
  ["GET", "/api/dashboard/usage/summary"],
  ["GET", "/dashboard"],
  ["GET", "/dashboard/login"],
  ["GET", "/dashboard/device"],
  ["POST", "/dashboard/device/approve", "form"],
  ["POST", "/dashboard/device/deny", "form"],
  ["POST", "/dashboard/keys", "form"],
  ["POST", "/dashboard/keys/{id}/revoke", "form"],
  ["GET", "/no/such/route"],
];

/** mulberry32: small, fast, and the same sequence everywhere. */
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  const pick = (list) => list[int(list.length)];
  return { next, int, pick, chance: (p) => next() < p };
}

const oddNumbers = [
  -1,
  0,
  -0,
  1,
  2 ** 31,
  2 ** 53 + 1,
  -(2 ** 63),
  1e308,
  -1e308,
  1.5,
  0.1,
  1e-320,
  123456789012345,
];
const oddNumberTexts = [
  "1e400",
  "-1e400",
  "00",
  "0x10",
  "NaN",
  "Infinity",
  "-",
  "1.",
  ".5",
  "1e",
  "9".repeat(400),
];
const oddStrings = [
  "",
  " ",
  "\u0000",
  "\ud800",
  "\udfff\ud800",
  "👩‍👩‍👧‍👦".repeat(50),
  "\u202e\u202dRTL",
  "é".normalize("NFD"),
  "ﷺ".repeat(100),
  "\\",
  '"',
  "</script><script>alert(1)</script>",
  "../../etc/passwd",
  "%00%ff",
  "[[mock:fail=500]]",
  "[[mock:fail=503]]",
  "[[mock:words=100001]]",
  "[[mock:words=-3]]",
  "[[mock:delay=99999999]]",
  "[[mock:break=1]]",
  "[[mock:tool]]",
  "[[mock:reject=context_length_exceeded]]",
  "x".repeat(70_000),
  "a\r\nb",
  "mock-gpt",
  "mock-gpt:free",
  "mock-auto",
  "mock-pro",
  "mock-flaky",
  "no-such-model",
];

function randomValue(r, depth = 0) {
  const kind = depth > 4 ? r.int(4) : r.int(7);
  switch (kind) {
    case 0:
      return null;
    case 1:
      return r.chance(0.5);
    case 2:
      return r.pick(oddNumbers);
    case 3:
      return r.pick(oddStrings);
    case 4:
      return Array.from({ length: r.int(4) }, () => randomValue(r, depth + 1));
    case 5: {
      const o = {};
      for (let i = r.int(4); i > 0; i--)
        o[
          r.pick([
            "type",
            "role",
            "content",
            "model",
            "x",
            "__proto__",
            "constructor",
            r.pick(oddStrings),
          ])
        ] = randomValue(r, depth + 1);
      return o;
    }
    default:
      return r.pick(oddStrings);
  }
}

/** A valid body with one or a few fields broken: wrong types, odd numbers, gone or extra keys. */
function mutate(r, body) {
  const copy = structuredClone(body);
  const keys = Object.keys(copy);
  for (let n = 1 + r.int(3); n > 0; n--) {
    const roll = r.int(6);
    const key = r.pick(keys.length ? keys : ["x"]);
    if (roll === 0) delete copy[key];
    else if (roll === 1) copy[key] = randomValue(r);
    else if (roll === 2) copy[r.pick(oddStrings).slice(0, 20) || "k"] = randomValue(r);
    else if (roll === 3) copy.stream = r.pick([true, false, "yes", 1, null]);
    else if (roll === 4 && Array.isArray(copy.messages))
      copy.messages = [
        { role: r.pick(["user", "assistant", "tool", "system", "bogus"]), content: randomValue(r) },
      ];
    else copy[key] = r.pick(oddNumbers);
  }
  return copy;
}

const deep = (n, open = "[", close = "]") => `${open.repeat(n)}${close.repeat(n)}`;

/** The body text for a JSON route: valid, mutated, nested, broken or not JSON at all. */
function jsonText(r, make) {
  const roll = r.int(12);
  const base = make();
  if (roll <= 3) return JSON.stringify(mutate(r, base));
  if (roll === 4) return JSON.stringify(base);
  if (roll === 5) {
    const levels = r.pick([127, 128, 129, 1000, 5000, 50_000]);
    const key = r.pick(Object.keys(base).concat(["tools", "metadata"]));
    return JSON.stringify({ ...base, [key]: "__D__" }).replace(
      '"__D__"',
      r.chance(0.5) ? deep(levels) : `${'{"a":'.repeat(levels)}1${"}".repeat(levels)}`,
    );
  }
  if (roll === 6) {
    const text = JSON.stringify(base);
    return text.slice(0, r.int(text.length));
  }
  if (roll === 7)
    return JSON.stringify(base).replace(/:\s*(\d+|"[^"]*")/, `:${r.pick(oddNumberTexts)}`);
  if (roll === 8)
    return r.pick([
      "",
      " ",
      "null",
      "[]",
      '"str"',
      "42",
      "{",
      "}{",
      "{'a':1}",
      '{"a":1,}',
      "\ufeff{}",
      '{"a":"\\ud800"}',
      "\u0000",
      "[[[[",
      '{"model":"mock-gpt"}{"x":1}',
    ]);
  if (roll === 9) return JSON.stringify(randomValue(r));
  if (roll === 10)
    return JSON.stringify({
      ...base,
      messages: Array.from({ length: 300 }, () => ({ role: "user", content: r.pick(oddStrings) })),
    });
  return JSON.stringify(mutate(r, mutate(r, base)));
}

function multipartBody(r) {
  const boundary = r.pick(["fuzzb", "", "a".repeat(200), "--", "x y"]);
  const parts = [];
  const part = (name, value, filename) =>
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"${filename ? `; filename="${filename}"` : ""}\r\n${filename ? "Content-Type: audio/wav\r\n" : ""}\r\n${value}\r\n`;
  if (r.chance(0.8)) parts.push(part("model", r.pick(["mock-whisper", "mock-gpt", "", "\u0000"])));
  if (r.chance(0.8))
    parts.push(
      part(
        "file",
        r.pick(["RIFF....WAVEfmt ", "", "\u0000".repeat(100), "garbage".repeat(50)]),
        r.pick(["a.wav", "../x", "", "ü.mp3"]),
      ),
    );
  if (r.chance(0.3))
    parts.push(part(r.pick(oddStrings).slice(0, 30), r.pick(oddStrings).slice(0, 200)));
  let body = parts.join("");
  if (r.chance(0.7)) body += `--${boundary}--\r\n`;
  if (r.chance(0.2)) body = body.slice(0, r.int(body.length));
  const type = r.pick([
    `multipart/form-data; boundary=${boundary}`,
    "multipart/form-data",
    "multipart/form-data; boundary=other",
    "application/json",
    "text/plain",
  ]);
  return { body, type };
}

const keys = [
  KEY,
  KEY,
  KEY,
  KEY,
  KEY,
  KEY,
  KEY,
  KEY,
  KEY,
  KEY,
  SHARED,
  LOGIN,
  ADMIN,
  POOR,
  VICTIM,
  "kn-unknown-key-0000000000000000000",
  "sk-not-ours",
  "",
  "kn-",
  "Bearer",
];

/**
 * The owner's dashboard session, as placeholders: plans are made before the gateway is up, and
 * `withSession` fills in the real cookie, CSRF token and origin as each request is sent.
 */
const owner = { cookie: "__COOKIE__", csrf: "__CSRF__", origin: "__ORIGIN__" };

function withSession(plan, session) {
  if (plan.raw) return plan;
  const fill = (text) =>
    text
      .replaceAll(owner.cookie, session.cookie)
      .replaceAll(owner.csrf, session.csrf)
      .replaceAll(owner.origin, session.origin);
  const headers = Object.fromEntries(Object.entries(plan.headers).map(([k, v]) => [k, fill(v)]));
  return { ...plan, headers, body: typeof plan.body === "string" ? fill(plan.body) : plan.body };
}

function headersFor(r, method, path) {
  const headers = {};
  if ((path.startsWith("/dashboard") || path.startsWith("/api/dashboard")) && r.chance(0.7)) {
    headers.cookie = owner.cookie;
    headers["x-csrf-token"] = r.chance(0.8) ? owner.csrf : "forged";
    headers.origin = owner.origin;
    return headers;
  }
  const key = r.pick(keys);
  const where = r.int(10);
  if (where <= 6) headers.authorization = `Bearer ${key}`;
  else if (where <= 8) headers["x-api-key"] = key;
  else if (r.chance(0.3))
    headers.authorization = r.pick([
      "Basic YTpi",
      "Bearer",
      `bearer  ${KEY}`,
      `Bearer ${KEY} extra`,
      "Bearer \t",
    ]);
  if (path.startsWith("/api/admin") && r.chance(0.6)) headers.authorization = `Bearer ${ADMIN}`;
  // Logout would revoke the shared login key and turn the rest of the run into 401s.
  if ((path.startsWith("/api/keys") || path.startsWith("/api/auth/whoami")) && r.chance(0.5))
    headers.authorization = `Bearer ${LOGIN}`;
  if (path.startsWith("/api/auth/logout") && headers.authorization?.includes(LOGIN))
    delete headers.authorization;
  if (r.chance(0.15))
    headers.origin = r.pick(["http://evil.example", "null", "http://127.0.0.1:1"]);
  if (r.chance(0.1))
    headers["sec-fetch-site"] = r.pick(["cross-site", "same-site", "same-origin", "none", "weird"]);
  if (r.chance(0.1)) headers["anthropic-beta"] = r.pick(["", "x".repeat(2000), "a,b,,c"]);
  // The MCP transport wants both; without them it answers 406 before reading the body.
  if (path === "/mcp" && r.chance(0.8)) headers.accept = "application/json, text/event-stream";
  if (r.chance(0.1)) headers.accept = r.pick(["*/*", "text/event-stream", "application/xml", "ÿ"]);
  if (r.chance(0.05)) headers["x-filler"] = "f".repeat(r.pick([100, 8000]));
  if (r.chance(0.05))
    headers.cookie = r.pick([
      "gateway_session=forged",
      "gateway_session=",
      "a=b; gateway_session=%00",
    ]);
  if (method === "OPTIONS")
    headers["access-control-request-method"] = r.pick(["POST", "GET", "DELETE", "BOGUS"]);
  return headers;
}

function fillPath(r, path) {
  let out = path.replace(/\{id\}/g, () =>
    encodeURIComponent(
      r.pick([
        "victim",
        "fuzz",
        "kv",
        "job_1",
        "nope",
        "..",
        "%00",
        "ü",
        "x".repeat(300),
        "1;DROP TABLE accounts",
      ]),
    ),
  );
  if (r.chance(0.25))
    out += `?${r.pick(["limit=-1", "limit=1e309", "limit=abc", "limit=5", "days=0", "days=99999", "user_code=BCDF-GHJK", "user_code=%00", "token=x", "a=1&a=2", "%ff=%fe"])}`;
  return out;
}

/** One request through undici; a raw-socket request for what undici will not send. */
function planRequest(r) {
  const rawRoll = r.next();
  if (rawRoll < 0.06) return { raw: rawRequest(r) };
  const [declared, template, make] = r.pick(routes);
  const method = r.chance(0.85)
    ? declared
    : r.pick(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]);
  const path = fillPath(r, template);
  const headers = headersFor(r, method, path);
  let body;
  if (method !== "GET" && method !== "HEAD") {
    if (make === "multipart") {
      const m = multipartBody(r);
      body = m.body;
      headers["content-type"] = m.type;
    } else if (make === "form") {
      body = r.chance(0.6)
        ? new URLSearchParams({
            user_code: r.pick(["BCDF-GHJK", "", "é", "x".repeat(100)]),
            label: r.pick(oddStrings).slice(0, 300),
            csrf_token: r.chance(0.8) ? owner.csrf : "x",
          }).toString()
        : r.pick(oddStrings).slice(0, 500);
      headers["content-type"] = r.pick([
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=z",
        "application/json",
      ]);
    } else if (typeof make === "function") {
      body = jsonText(r, make);
      headers["content-type"] = r.chance(0.9)
        ? "application/json"
        : r.pick([
            "text/plain",
            "application/json; charset=latin1",
            "application/x-www-form-urlencoded",
            "",
          ]);
    } else if (r.chance(0.3)) {
      body = jsonText(r, () => ({ x: 1 }));
      headers["content-type"] = "application/json";
    }
  }
  return { method, path, headers, body };
}

/** Bytes undici refuses to send: bad methods, broken framing, oversized headers, CONNECT. */
function rawRequest(r) {
  const body = '{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}';
  return r.pick([
    () => "FROB /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
    () => "GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n",
    () => "GET\r\n\r\n",
    () => "\u0000\u0001\u0002\r\n\r\n",
    () => `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`,
    () => "GET /v1/models HTTP/1.1\r\nHo st: x\r\n\r\n",
    () => "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    () =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${body.length + 50}\r\n\r\n${body}`,
    () =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    () =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n${body}\r\n0\r\n\r\n`,
    () => `GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n`,
    () => `GET ${"/a".repeat(5000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    () => `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${"é".repeat(40)}\r\n\r\n`,
    () =>
      `POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n\xff\xfe\xfd`,
  ])();
}

/** Sends raw bytes; resolves with the status the server answered, or "closed" with none. */
function sendRaw(port, text) {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port }, () =>
      socket.end(Buffer.from(text, "latin1")),
    );
    let received = "";
    const timer = setTimeout(() => {
      socket.destroy();
      resolve("hung");
    }, 15_000);
    socket.on("data", (d) => {
      received += d.toString("latin1");
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      const m = /^HTTP\/1\.1 (\d{3})/.exec(received);
      resolve(m ? Number(m[1]) : "closed");
    });
  });
}

function fuzzConfig() {
  const config = structuredClone(demoConfig);
  config.providers = [
    { id: "mock", wire: "mock", mock: { job_seconds: 0.01 } },
    { id: "mock-down", wire: "mock", mock: { fail_status: 503 } },
  ];
  config.accounts = [
    {
      ...config.accounts[0],
      id: "acct",
      balance_idr: 1_000_000_000,
      rpm_limit: 1_000_000,
      keys: [
        { id: "k1", label: "main", kind: "standard", value: KEY },
        { id: "ks", label: "shared", kind: "shared", value: SHARED },
        { id: "kl", label: "login", kind: "login", value: LOGIN },
      ],
    },
    { id: "poor", balance_idr: 0, keys: [{ id: "kp", value: POOR }] },
    // What the admin routes suspend, top up and strip of keys; the others stay usable all run.
    { id: "victim", balance_idr: 1000, keys: [{ id: "kv", value: VICTIM }] },
  ];
  config.admin_keys = [ADMIN];
  return config;
}

/**
 * Runs `count` hostile requests from `seed` against a fresh gateway and returns what came back.
 * `failures` lists the requests that got a 5xx other than 503, no answer, or an internal error.
 */
export function planRequests(count, seed) {
  const r = rng(seed);
  return Array.from({ length: count }, () => planRequest(r));
}

export async function runFuzz({ count = 10_000, seed = 1, concurrency = 16, log = () => {} } = {}) {
  // Made before the gateway starts: making them blocks the loop for seconds, which would let the
  // server's keep-alive timer and the first request race on the owner session's connection.
  const plans = planRequests(count, seed);
  const internalErrors = [];
  const originalError = console.error;
  console.error = (...args) => {
    const line = args.map(String).join(" ");
    if (line.startsWith("internal error")) internalErrors.push(line);
    else originalError(...args);
  };
  const gw = await startGateway({
    db: ":memory:",
    port: 0,
    config: fuzzConfig(),
    // Short, so requests that never finish their body are answered within the run.
    connections: { headersTimeoutMs: 2_000, requestTimeoutMs: 3_000 },
  });
  // Idle connections are dropped by the client well before the server's keep-alive timeout, so a
  // request never races the server closing the connection it was sent on.
  const agent = new Agent({
    connections: concurrency,
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
    keepAliveTimeout: 1_000,
    keepAliveMaxTimeout: 1_000,
  });
  const login = await request(gw.ownerUrl, { dispatcher: agent });
  await login.body.text();
  const session = {
    cookie: String(login.headers["set-cookie"]).split(";")[0],
    csrf: "",
    origin: gw.url,
  };
  const page = await request(`${gw.url}/dashboard`, {
    headers: { cookie: session.cookie },
    dispatcher: agent,
  });
  session.csrf = /name="csrf-token" content="([^"]+)"/.exec(await page.body.text())?.[1] ?? "";
  const statuses = {};
  const failures = [];
  const started = performance.now();
  let next = 0;
  const note = (status, plan) => {
    statuses[status] = (statuses[status] ?? 0) + 1;
    const bad =
      status === "hung" ||
      status === "error" ||
      (typeof status === "number" && status >= 500 && status !== 503);
    if (bad && failures.length < 20) {
      const what = plan.raw
        ? `raw ${JSON.stringify(plan.raw.slice(0, 120))}`
        : `${plan.method} ${plan.path.slice(0, 120)} ${JSON.stringify(plan.body ?? "").slice(0, 200)}`;
      failures.push(`${status}: ${what}`);
    }
    if (bad && failures.length >= 20) failures.truncated = true;
  };
  const worker = async () => {
    while (next < plans.length) {
      const plan = withSession(plans[next++], session);
      if (next % 1000 === 0) log(`${next} sent`);
      if (plan.raw) {
        note(await sendRaw(gw.port, plan.raw), plan);
        continue;
      }
      try {
        const res = await request(`${gw.url}${plan.path}`, {
          method: plan.method,
          headers: plan.headers,
          body: plan.body,
          dispatcher: agent,
        });
        await res.body.text();
        note(res.statusCode, plan);
      } catch (err) {
        // undici refusing to send (a header it will not encode) is not the gateway's answer.
        const code = err?.code ?? "";
        note(
          code.startsWith("UND_ERR_INVALID") || err?.name === "InvalidArgumentError"
            ? "not-sent"
            : "error",
          plan,
        );
        if (!(code.startsWith("UND_ERR_INVALID") || err?.name === "InvalidArgumentError"))
          log(`request error: ${code} ${err?.message}`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
    const alive = await request(`${gw.url}/v1/models`, { dispatcher: agent });
    await alive.body.text();
    if (alive.statusCode !== 200)
      failures.push(`gateway not answering after the run: ${alive.statusCode}`);
  } finally {
    await agent.close();
    await gw.close();
    console.error = originalError;
  }
  for (const line of internalErrors.slice(0, 10)) failures.push(`logged: ${line}`);
  return {
    seed,
    requests: count,
    seconds: Math.round((performance.now() - started) / 100) / 10,
    statuses,
    internalErrors: internalErrors.length,
    failures,
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name, fallback) => {
    const found = process.argv.find((a) => a.startsWith(`--${name}=`));
    return found ? Number(found.slice(name.length + 3)) : fallback;
  };
  const result = await runFuzz({
    count: arg("count", 10_000),
    seed: arg("seed", 1),
    concurrency: arg("concurrency", 16),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  process.exit(result.failures.length === 0 ? 0 : 1);
}
