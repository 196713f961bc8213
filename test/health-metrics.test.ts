import { connect } from "node:net";
import { Hono } from "hono";
import { afterEach, describe, expect, it } from "vitest";
import type { AppEnv } from "../src/server/http/context.js";
import { Readiness } from "../src/server/observe/health.js";
import { healthHandlers } from "../src/server/routes/health.js";
import {
  ADMIN_KEY,
  baseConfig,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

const gateways: TestGateway[] = [];
afterEach(async () => {
  for (const gw of gateways.splice(0)) await gw.close();
});

async function gateway(options: Parameters<typeof testGateway>[0] = {}): Promise<TestGateway> {
  const gw = await testGateway(options);
  gateways.push(gw);
  return gw;
}

async function scrape(gw: { url: string }, key = ADMIN_KEY): Promise<string> {
  const res = await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${key}` } });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
}

/** The value of one sample line, e.g. sample(text, 'gateway_tokens_total{model="m",direction="input"}'). */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe("health", () => {
  it("answers liveness and readiness once started", async () => {
    const gw = await gateway();
    const live = await fetch(`${gw.url}/health`);
    expect(live.status).toBe(200);
    expect(await live.json()).toEqual({ status: "ok" });
    for (const path of ["/health/ready", "/health?ready"]) {
      const ready = await fetch(`${gw.url}${path}`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: "ready" });
    }
  });

  it("says 503 with the reason before start-up finishes and once shutdown begins", async () => {
    const readiness = new Readiness();
    const app = new Hono<AppEnv>();
    const health = healthHandlers(readiness);
    app.get("/health", health.live);
    app.get("/health/ready", health.ready);
    const state = async () => {
      const res = await app.request("/health/ready");
      return [res.status, await res.json()];
    };
    expect(await state()).toEqual([503, { status: "unavailable", reason: "starting" }]);
    readiness.ready();
    expect(await state()).toEqual([200, { status: "ready" }]);
    readiness.stopping();
    expect(await state()).toEqual([503, { status: "unavailable", reason: "stopping" }]);
    expect((await app.request("/health")).status).toBe(200);
  });
});

describe("GET /", () => {
  it("is a short page leading to the dashboard, the models and health", async () => {
    const gw = await gateway();
    const res = await fetch(`${gw.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-security-policy")).toContain("default-src 'none'");
    const html = await res.text();
    for (const href of ['href="/dashboard"', 'href="/v1/models"', 'href="/health"'])
      expect(html).toContain(href);
  });
});

const metricName = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/**
 * The scrape read by the text format's grammar (exposition format 0.0.4), strictly: HELP and TYPE
 * lines, each family typed once and before its samples, label values quoted with only \\, \" and
 * \n escaped, numbers as Prometheus reads them. Returns each sample by family.
 */
function parseExposition(text: string) {
  expect(text.endsWith("\n")).toBe(true);
  const families = new Map<
    string,
    { type: string; samples: { name: string; labels: Record<string, string>; value: number }[] }
  >();
  for (const line of text.slice(0, -1).split("\n")) {
    if (line === "") continue;
    const help = /^# HELP (\S+) ((?:[^\\]|\\[\\n])*)$/.exec(line);
    if (help) {
      expect(help[1]).toMatch(metricName);
      continue;
    }
    const type = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (type) {
      expect(families.has(type[1]!)).toBe(false);
      families.set(type[1]!, { type: type[2]!, samples: [] });
      continue;
    }
    const found = /^([^{ ]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    expect(found, line).not.toBeNull();
    const [, name, labelText = "", valueText] = found!;
    expect(name).toMatch(metricName);
    const labels: Record<string, string> = {};
    const pair = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/y;
    for (let at = 0; at < labelText.length; ) {
      pair.lastIndex = at;
      const m = pair.exec(labelText);
      expect(m, line).not.toBeNull();
      expect(labels[m![1]!]).toBeUndefined();
      labels[m![1]!] = m![2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
      at = pair.lastIndex;
    }
    const value =
      valueText === "+Inf" ? Infinity : valueText === "-Inf" ? -Infinity : Number(valueText);
    expect(valueText === "NaN" || !Number.isNaN(value), line).toBe(true);
    const family = families.get(name!) ?? families.get(name!.replace(/_(bucket|sum|count)$/, ""));
    expect(family, `${name} before its TYPE`).toBeDefined();
    family!.samples.push({ name: name!, labels, value });
  }
  return families;
}

describe("GET /metrics", () => {
  it("counts a request line Node could not take under method other: a client's made-up methods never become label values", async () => {
    const gw = await gateway();
    for (const method of ["BREWA", "BREWB", "BREWC"]) {
      const answer = await new Promise<string>((resolve) => {
        const socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
        let raw = "";
        socket.on("data", (d: Buffer) => {
          raw += d.toString("latin1");
        });
        socket.on("error", () => {});
        socket.on("close", () => resolve(raw));
        socket.write(`${method} /v1/models HTTP/1.1\r\nhost: x\r\n\r\n`);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    }
    const text = await scrape(gw);
    expect(text).not.toMatch(/BREW/);
    expect(
      sample(
        text,
        'gateway_http_requests_total{route="unmatched",method="other",status="400",model="none"}',
      ),
    ).toBe(3);
  });

  it("counts requests by route, model and status, tokens, money charged and upstream failures, exactly", async () => {
    const gw = await gateway();
    const ok = await post(gw, "/v1/chat/completions", chat("hello"));
    const okBody = (await ok.json()) as {
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    await post(gw, "/v1/chat/completions", chat("again"));
    expect((await post(gw, "/v1/chat/completions", chat("x", "nope"))).status).toBe(400);
    const fallback = await post(gw, "/v1/chat/completions", chat("via route", "auto"));
    expect(fallback.status).toBe(200);
    await fallback.text();
    await fetch(`${gw.url}/v1/files/file_doesnotexist`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    await gw.services.ledger.committed();

    const text = await scrape(gw);
    const requests = (route: string, status: number, model: string) =>
      sample(
        text,
        `gateway_http_requests_total{route="${route}",method="POST",status="${status}",model="${model}"}`,
      );
    expect(requests("/v1/chat/completions", 200, "mock-gpt")).toBe(2);
    expect(requests("/v1/chat/completions", 200, "auto")).toBe(1);
    // A model the catalog does not know never becomes a label value.
    expect(requests("/v1/chat/completions", 400, "none")).toBe(1);
    expect(text).not.toContain('model="nope"');
    expect(text).not.toContain("file_doesnotexist");
    expect(
      sample(
        text,
        'gateway_http_request_duration_seconds_count{route="/v1/chat/completions",method="POST"}',
      ),
    ).toBe(4);

    // Tokens and money agree with what the ledger wrote. The metrics name the model asked for; the
    // ledger's per-model report the one that served, mock-gpt for the route's request too.
    const logged = gw.services.store
      .usageByModel("acct", 0)
      .map((m) => ({ model: m.model, i: m.input_tokens, o: m.output_tokens, c: m.cost_micro }));
    expect(logged.map((r) => r.model)).toEqual(["mock-gpt"]);
    const [gpt] = logged;
    expect(gpt.i).toBeGreaterThanOrEqual(okBody.usage.prompt_tokens);
    const asked = (series: (model: string) => string) =>
      (sample(text, series("mock-gpt")) ?? 0) + (sample(text, series("auto")) ?? 0);
    expect(sample(text, 'gateway_charged_micro_idr_total{model="auto"}')).toBeGreaterThan(0);
    expect(asked((m) => `gateway_tokens_total{model="${m}",direction="input"}`)).toBe(gpt.i);
    expect(asked((m) => `gateway_tokens_total{model="${m}",direction="output"}`)).toBe(gpt.o);
    expect(asked((m) => `gateway_charged_micro_idr_total{model="${m}"}`)).toBe(gpt.c);
    // The route's first step (mock-down) failed once before mock-gpt answered.
    expect(
      sample(text, 'gateway_upstream_failures_total{provider="mock-down",kind="unavailable"}'),
    ).toBe(1);
    expect(sample(text, "gateway_holds_in_flight")).toBe(0);
    expect(sample(text, "gateway_held_micro_idr")).toBe(0);
  });

  it("counts a route's requests by the model that served them too, beside the name asked for", async () => {
    const gw = await gateway({
      config: baseConfig({
        routes: [
          { name: "auto", steps: ["mock-down", "mock-gpt"] },
          { name: "gpt-first", steps: ["mock-gpt", "mock-down"] },
        ],
      }),
    });
    for (const model of ["auto", "auto", "gpt-first", "mock-gpt"]) {
      const res = await post(gw, "/v1/chat/completions", chat("via route", model));
      expect(res.status).toBe(200);
      await res.text();
    }
    const streamed = await post(gw, "/v1/completions", {
      model: "auto",
      prompt: "def add(a, b):",
      stream: true,
    });
    expect(streamed.status).toBe(200);
    await streamed.text();
    // Served by none: refused before a model answered.
    expect((await post(gw, "/v1/chat/completions", chat("x", "mock-down"))).status).toBe(503);
    await gw.services.ledger.committed();

    const text = await scrape(gw);
    const served = (model: string, by: string) =>
      sample(text, `gateway_served_requests_total{model="${model}",served_model="${by}"}`);
    expect(served("auto", "mock-gpt")).toBe(3);
    expect(served("gpt-first", "mock-gpt")).toBe(1);
    expect(served("mock-gpt", "mock-gpt")).toBe(1);
    expect(text).not.toContain('served_model="mock-down"');
    expect(text).not.toMatch(/served_model="none"/);
    // The request counter still names the model asked for: a route's requests under the route.
    expect(
      sample(
        text,
        'gateway_http_requests_total{route="/v1/chat/completions",method="POST",status="200",model="auto"}',
      ),
    ).toBe(2);
  });

  it("writes the Prometheus text format: every line parses, histograms add up", async () => {
    const gw = await gateway();
    await (await post(gw, "/v1/chat/completions", chat("hello"))).text();
    await (await post(gw, "/v1/chat/completions", chat("via route", "auto"))).text();
    await (await post(gw, "/v1/chat/completions", chat("x", "nope"))).text();
    await (
      await fetch(`${gw.url}/v1/nothing-here`, { headers: { authorization: `Bearer ${KEY}` } })
    ).text();
    await gw.services.ledger.committed();
    const families = parseExposition(await scrape(gw));
    expect([...families].map(([name, f]) => `${name} ${f.type}`)).toEqual([
      "gateway_http_requests_total counter",
      "gateway_http_request_duration_seconds histogram",
      "gateway_tokens_total counter",
      "gateway_charged_micro_idr_total counter",
      "gateway_served_requests_total counter",
      "gateway_upstream_failures_total counter",
      "gateway_holds_in_flight gauge",
      "gateway_held_micro_idr gauge",
    ]);
    for (const [, family] of families)
      if (family.type === "counter")
        for (const s of family.samples) expect(s.value).toBeGreaterThan(0);
    const histogram = families.get("gateway_http_request_duration_seconds")!.samples;
    const routes = new Set(histogram.map((s) => s.labels.route));
    expect(routes).toEqual(new Set(["/v1/chat/completions", "unmatched"]));
    for (const route of routes) {
      const of = histogram.filter((s) => s.labels.route === route);
      const buckets = of.filter((s) => s.name.endsWith("_bucket"));
      const bounds = buckets.map((s) => Number(s.labels.le === "+Inf" ? Infinity : s.labels.le));
      expect(bounds).toEqual([...bounds].sort((a, b) => a - b));
      expect(bounds.at(-1)).toBe(Infinity);
      const counts = buckets.map((s) => s.value);
      expect(counts).toEqual([...counts].sort((a, b) => a - b));
      const count = of.find((s) => s.name.endsWith("_count"))!.value;
      expect(counts.at(-1)).toBe(count);
      expect(count).toBe(route === "unmatched" ? 1 : 3);
      expect(of.find((s) => s.name.endsWith("_sum"))!.value).toBeGreaterThan(0);
    }
  });

  it("shows holds in flight while a request waits upstream", async () => {
    const gw = await gateway();
    const slow = post(gw, "/v1/chat/completions", chat("[[mock:delay=3000]] wait"));
    // Read once the request is admitted, not after a fixed wait that a busy machine can outlast
    // before admission (0 in flight) or past the answer.
    let during = await scrape(gw);
    for (let i = 0; i < 100 && sample(during, "gateway_holds_in_flight") === 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      during = await scrape(gw);
    }
    expect(sample(during, "gateway_holds_in_flight")).toBe(1);
    expect(sample(during, "gateway_held_micro_idr")).toBeGreaterThan(0);
    expect((await slow).status).toBe(200);
    expect(sample(await scrape(gw), "gateway_holds_in_flight")).toBe(0);
  });

  it("needs an admin key by default, is open when public, and absent when off", async () => {
    const admin = await gateway();
    const anonymous = await fetch(`${admin.url}/metrics`);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.text()).toBe("admin key required");
    const user = await fetch(`${admin.url}/metrics`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(user.status).toBe(401);

    const open = await gateway({ metrics: "public" });
    const res = await fetch(`${open.url}/metrics`);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("# TYPE gateway_http_requests_total counter");

    const off = await gateway({ metrics: "off" });
    expect(
      (await fetch(`${off.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } }))
        .status,
    ).toBe(404);
    expect((await fetch(`${off.url}/health`)).status).toBe(200);
  });
});
